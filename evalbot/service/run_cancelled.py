"""GitHub Actions mode: the evaluation's workflow run was cancelled, so its evaluation is.

`/evalbot cancel` on a PR whose evaluation holds the only self-hosted runner is handled by a job
on a GitHub-hosted runner (evalbot.github.run_cancel): it cancels the workflow run evaluating
that PR. GitHub's runner then sends the step's process SIGINT, SIGTERM 7.5 s later and kills
the process tree 2.5 s after that (docs/github.md). `evalbot worker --on-signal cancel` (the
`work` job) answers the first signal here, inside that window:

1. the job in flight is recorded as cancelled in the store and its lease closed, so whatever the
   worker thread still does with it is refused (finish, fail and retry need a running job);
2. the run on the box is stopped (evalbot.service.pool.stop_run: the harness and every process
   under it; the sandbox's bubblewrap dies with its parent), and, at the same time,
3. the PR's sticky comment and status say it was cancelled.

Nothing is lost: the measurements of a cancelled job are not a verdict, and `/evalbot rerun`
queues the head again. A job the worker had not started stays queued for the next run.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evalbot.config.errors import EvalbotError
from evalbot.config.settings import BoxConfig
from evalbot.remote.box import BoxError
from evalbot.service.pool import close_quietly, open_box, stop_run
from evalbot.store.jobs import JobRow, Store

log = logging.getLogger("evalbot.worker")
REASON = "cancelled: its GitHub Actions run was cancelled"
NOTE = ("Cancelled: the evaluation's GitHub Actions run was cancelled (`/evalbot cancel`, or by "
        "hand); `/evalbot rerun` queues it again.")
Announce = Callable[[JobRow], None]  # say on the PR that the job was cancelled


@dataclass(frozen=True)
class InFlight:
    job: JobRow
    box: BoxConfig


def in_flight(store: Store, owners: dict[str, BoxConfig]) -> list[InFlight]:
    """The running jobs whose lease one of these workers (name -> its box) holds."""
    return [InFlight(j, owners[j.lease_owner]) for j in store.jobs("running")
            if j.lease_owner in owners]


def cancel_in_flight(store_path: Path, owners: dict[str, BoxConfig], announce: Announce | None,
                     deadline_s: float = 8.0) -> list[str]:
    """Cancel every job these workers hold; returns their ids. The box and GitHub are told in
    parallel: together they must fit in the seconds GitHub leaves before it kills the step."""
    store = Store(store_path)
    try:
        running = in_flight(store, owners)
        for item in running:  # what `/evalbot cancel` does: the PR's queued or running jobs
            if item.job.pr is not None:
                store.cancel(item.job.repo, item.job.pr, REASON)
            store.release(item.job.id, item.job.lease_owner or "")
    finally:
        store.close()
    tasks = [threading.Thread(target=_stop_on_box, args=(i,), daemon=True) for i in running]
    if announce is not None:
        tasks += [threading.Thread(target=_announce, args=(announce, i.job), daemon=True)
                  for i in running]
    for task in tasks:
        task.start()
    for task in tasks:
        task.join(timeout=deadline_s)
    return [i.job.id for i in running]


def _stop_on_box(item: InFlight) -> None:
    try:
        box = open_box(item.box)
    except (BoxError, EvalbotError) as exc:
        log.warning("job %s cancelled; could not reach box %s to stop its run: %s",
                    item.job.id, item.box.name, exc)
        return
    try:
        found = stop_run(box, item.box, item.job.id)
        log.info("job %s cancelled; its run on box %s %s", item.job.id, item.box.name,
                 "stopped" if found else "was not running")
    except (BoxError, EvalbotError) as exc:
        log.warning("job %s cancelled; could not stop its run on box %s: %s", item.job.id,
                    item.box.name, exc)
    finally:
        close_quietly(box)


def _announce(announce: Announce, job: JobRow) -> None:
    try:
        announce(job)
    except Exception as exc:  # GitHub down: the store says cancelled; the next intake replies
        log.warning("job %s cancelled; could not say so on the PR: %s", job.id, exc)

