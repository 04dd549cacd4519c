"""Where a PR's evaluation is, in its pending comment (issue 48, point 8).

Queued: the job's place in the queue (the jobs running and those queued before it) and an
estimate of when it starts, from the box time of the store's recent evaluations of the
repository. Taken: the box and time it started, and a link to its run page on the dashboard
(and to the Actions run, where a workflow runs the worker). Both read the store alone.

The queue is served fairly across authors and PRs (store.jobs `fairest`), not strictly by age:
the count of jobs ahead is an upper bound where other authors wait, and the comment says so.
"""

from __future__ import annotations

import logging
import time
from statistics import median

from evalbot.github import texts
from evalbot.github.publish import PublisherProtocol
from evalbot.github.writing import Busy, writing
from evalbot.report.box_time_view import duration
from evalbot.report.run_page import run_path
from evalbot.store.jobs import JobRow, Store

log = logging.getLogger("evalbot.github")
RECENT = 10  # evaluations the estimate's median is taken over


def recent_box_times(store: Store, repo: str, n: int = RECENT) -> list[float]:
    """The box time of the repository's last `n` stored evaluations (seconds, newest first)."""
    out = []
    for row in store.history(repo=repo):
        total = ((row.get("results") or {}).get("timing") or {}).get("total_s")
        if isinstance(total, (int, float)) and total > 0:
            out.append(float(total))
        if len(out) == n:
            break
    return out


def queued_note(store: Store, job_id: str, attempt: int) -> str:
    """`Queued for evaluation: 1 running, 2 queued before it; …, it starts in about 6 min.`"""
    jobs = store.jobs()  # oldest first
    at = [j.id for j in jobs].index(job_id)
    job = jobs[at]
    running = [j for j in jobs if j.state == "running"]
    before = [j for j in jobs[:at] if j.state == "queued"]
    again = f" (attempt {attempt})" if attempt > 1 else ""
    if not running and not before:
        place = "next in the queue: nothing is running or queued before it"
    else:
        place = f"{len(running)} running and {len(before)} queued before it" + (
            " (the queue takes authors and PRs in turn, so it may start sooner)" if before else "")
    times = recent_box_times(store, job.repo)
    if not times:
        guess = "No evaluation of this repository is stored yet to estimate its time from."
    else:
        each = median(times)
        ahead = len(running) + len(before)
        start = f"it starts in at most about {duration(ahead * each)} on one box, and " \
            if ahead else ""
        guess = (f"Recent evaluations took {duration(each)} of box time each (median of the "
                 f"last {len(times)}): {start}its verdict comes about "
                 f"{duration((ahead + 1) * each)} from now.")
    return f"Queued for evaluation{again}: {place}. {guess}"


def started_note(job: JobRow, box: str, run_page: str, actions_run: str = "") -> str:
    """`Running on box `a` since 11:42 UTC (attempt 1): [its run page](…).`"""
    since = time.strftime("%H:%M UTC", time.gmtime(job.started or time.time()))
    links = [f"[its run page]({run_page})"] if run_page else []
    links += [f"[the Actions run]({actions_run})"] if actions_run else []
    where = f"; {' · '.join(links)}" if links else ""
    return (f"Running on box `{box}` since {since} (attempt {job.attempt}){where}. Its run "
            "page shows the verdict once it is in.")


def run_page_url(reports_url: str, job_id: str) -> str:
    """The dashboard's page of the run (report/run_page.py) under `service.reports_url`."""
    base = reports_url.rstrip("/")
    return f"{base}/dashboard/{run_path(job_id)}" if base else ""


START_TRIES = 5  # a start note waits at most 15 s for the PR's other writer


def announce_start(store: Store, publisher: PublisherProtocol, context: str, job: JobRow,
                   box: str, reports_url: str = "", actions_run: str = "") -> bool:
    """The pending comment and status of a job a worker took; nothing where the job is no
    longer the PR's newest (a newer head's comment stays). GitHub down: logged, never raised:
    the evaluation matters more than the note."""
    if job.pr is None:
        return False
    note = started_note(job, box, run_page_url(reports_url, job.id), actions_run)
    body = texts.pending_comment(job.head_sha, "running", note, context)
    for attempt in range(START_TRIES):
        try:
            # under the PR's claim, as a verdict's publication: a newer head admitted between
            # the check and the write would otherwise get the old head's note over its own
            with writing(store, job.repo, job.pr, f"start-{job.id}"):
                if not _newest_and_running(store, job):
                    return False
                # the status links the Actions run only: `/evalbot cancel` finds the run by it
                publisher.publish(job.pr, job.head_sha, body, ["eval:pending"], "pending",
                                  f"evaluating on box {box}", actions_run)
                return True
        except Busy:  # the dispatcher is writing this PR (a push, a command): after it
            time.sleep(1.0 + attempt)
        except Exception as exc:  # noqa: BLE001 (GitHub down: the run goes on)
            log.warning("job %s: could not say it started: %s", job.id, exc)
            return False
    log.warning("job %s: could not say it started: the PR stayed busy", job.id)
    return False


def _newest_and_running(store: Store, job: JobRow) -> bool:
    assert job.pr is not None
    jobs = store.pr_jobs(job.repo, job.pr)  # oldest first
    ids = [j.id for j in jobs]
    newer = jobs[ids.index(job.id) + 1:] if job.id in ids else jobs
    return not newer and store.get(job.id).state == "running"

