"""The worker: one per box. Lease a job, run it on the box, grade, record, publish; repeat.

Nothing is lost and nothing runs twice:
- the lease is renewed while the job runs; a worker that dies stops renewing, the lease expires
  and the next worker re-attaches to the harness still running on the box (same job id, same
  job directory) instead of starting it again;
- when a renewal finds the job no longer ours (a push superseded it, `/evalbot cancel`), the
  harness is killed on the box and the result, if any, is dropped;
- infra failures (box, connection, harness, base) are retried with exponential back-off, a
  bounded number of times; PR failures are verdicts. Only the last attempt publishes an error,
  into the PR's one sticky comment;
- a verdict is recorded before it is published, and every finished job not yet published is
  published again by the next sweep (publication is idempotent).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalbot import pipeline
from evalbot.calibrate import NoiseStore
from evalbot.config import BoxConfig
from evalbot.errors import EvalbotError, PipelineError
from evalbot.evaluation import failure_verdict, record_outputs
from evalbot.grading import grade
from evalbot.jobspec import make_job
from evalbot.policy import Policy
from evalbot.pool import close_quietly, open_box, resolve_main, stop_run
from evalbot.profile import Profile
from evalbot.store import JobRow, Store
from remote.box import Box, BoxError

log = logging.getLogger("evalbot.worker")
Publish = Callable[[Store, str], None]  # publish one finished job's final state to its PR


@dataclass(frozen=True)
class Settings:
    lease_ttl_s: float = 120.0  # a dead worker's job returns to the queue after this
    max_tries: int = 3  # leases of one job, crashed workers included
    backoff_s: float = 60.0  # first retry delay after an infra failure; doubles per try
    poll_s: float = 1.0  # idle wait between looks at the queue
    job_timeout_s: float = 6 * 3600.0
    follow_poll_s: float = 0.5


class Renewal:
    """Renews the lease on its own thread (and its own SQLite connection); when the job is no
    longer ours it kills the run on the box, so the pipeline's follow loop ends at once."""

    def __init__(self, store_path: Path, job_id: str, worker: str, settings: Settings,
                 on_lost: Callable[[], object]) -> None:
        self.store_path, self.job_id, self.worker = store_path, job_id, worker
        self.settings, self.on_lost = settings, on_lost
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"renew-{job_id}")

    def __enter__(self) -> Renewal:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        store = Store(self.store_path)
        try:
            while not self._stop.wait(self.settings.lease_ttl_s / 3):
                if not store.renew(self.job_id, self.worker, self.settings.lease_ttl_s):
                    self.lost.set()
                    self._stop_box_run()
                    return
        finally:
            store.close()

    def _stop_box_run(self) -> None:
        try:
            self.on_lost()
        except (BoxError, EvalbotError) as exc:
            log.warning("job %s: could not stop its run on the box: %s", self.job_id, exc)


class Worker:
    def __init__(self, name: str, box_config: BoxConfig, profile: Profile, policy: Policy,
                 store_path: Path, out_root: Path, settings: Settings,
                 publish: Publish | None = None, render: Callable[[dict[str, Any]], str]
                 | None = None) -> None:
        self.name, self.box_config, self.profile, self.policy = name, box_config, profile, policy
        self.store_path, self.out_root, self.settings = store_path, out_root, settings
        self._publish, self._render = publish, render
        self.stopping = threading.Event()
        self._box: Box | None = None

    # ---- the loop -------------------------------------------------------------------------
    def run(self, until_idle: bool = False) -> int:
        """Work until stopped (or, with until_idle, until the queue is empty); jobs handled."""
        store, handled = Store(self.store_path), 0
        try:
            while not self.stopping.is_set():
                self.publish_pending(store)
                if self.step(store):
                    handled += 1
                elif until_idle and not _waiting(store):
                    break
                else:
                    self.stopping.wait(self.settings.poll_s)
        finally:
            store.close()
            if self._box is not None:
                close_quietly(self._box)
        return handled

    def step(self, store: Store) -> bool:
        """Lease and handle one job; False when there was none."""
        job = store.lease(self.name, self.settings.lease_ttl_s, box=self.box_config.name)
        if job is None:
            return False
        log.info("%s: job %s (%s #%s %s), try %d", self.name, job.id, job.repo, job.pr,
                 job.head_sha[:10], job.tries)
        renewal = Renewal(self.store_path, job.id, self.name, self.settings,
                          lambda: stop_run(open_box(self.box_config), self.box_config, job.id))
        with renewal:
            try:
                self._handle(store, job, renewal)
            except (PipelineError, BoxError) as exc:
                self._infra(store, job, str(exc), renewal)
        if renewal.lost.is_set():
            store.release(job.id, self.name)
            log.info("%s: job %s is %s; dropped", self.name, job.id, store.get(job.id).state)
        self.publish_pending(store)
        return True

    # ---- one job --------------------------------------------------------------------------
    def _handle(self, store: Store, job: JobRow, renewal: Renewal) -> None:
        if job.tries > self.settings.max_tries:  # its workers kept dying: stop trying
            self._infra(store, job, f"the evaluation lost its worker {job.tries - 1} times",
                        renewal)
            return
        box = self._connected()
        base = job.base_sha if job.started and job.base_sha else resolve_main(box, self.box_config)
        store.set_base(job.id, base)
        self._main_moved(store, job.repo, base)
        noise = NoiseStore(self.store_path)
        floors = noise.floors(self.box_config.name, self.profile.name)
        noise.close()
        spec = make_job(self.profile, self.policy, self.box_config, base, job.head_sha,
                        job_id=job.id, sd_floors=floors)
        out = self.out_root / job.id
        out.mkdir(parents=True, exist_ok=True)
        results = pipeline.evaluate(box, self.box_config, spec, out,
                                    poll_s=self.settings.follow_poll_s,
                                    timeout_s=self.settings.job_timeout_s)
        if renewal.lost.is_set():
            return
        verdict = grade(results, self.policy)
        if verdict["kind"] == "infra-error" and job.tries < self.settings.max_tries:
            self._retry(store, job, "; ".join(verdict["reasons"]) or "infra-error")
            return
        done = store.finish(job.id, self.name, verdict, results) if verdict["kind"] != \
            "infra-error" else store.fail(job.id, self.name, "; ".join(verdict["reasons"]),
                                          retry=False, verdict=verdict, results=results) \
            == "failed"
        if done:
            record_outputs(out, verdict, self._render)

    def _infra(self, store: Store, job: JobRow, reason: str, renewal: Renewal) -> None:
        """A failure that is not the PR's: retry later, or give up and say so after the last."""
        if renewal.lost.is_set():
            return  # superseded or cancelled: the failure is the kill we caused
        self._drop_box()  # reconnect from scratch for the next job
        log.warning("%s: job %s try %d: %s", self.name, job.id, job.tries, reason)
        if job.tries < self.settings.max_tries:
            self._retry(store, job, reason)
            return
        verdict = failure_verdict(job, self.policy, self.profile.name,
                                  f"{reason} (gave up after {job.tries} attempts)")
        if store.fail(job.id, self.name, reason, retry=False, verdict=verdict) == "failed":
            record_outputs(self.out_root / job.id, verdict, self._render)

    def _retry(self, store: Store, job: JobRow, reason: str) -> None:
        wait = self.settings.backoff_s * 2 ** (job.tries - 1)
        store.fail(job.id, self.name, reason, retry=True, backoff_s=wait)

    def _main_moved(self, store: Store, repo: str, main_sha: str) -> None:
        """Verdicts against an older main go stale; merge candidates (improved ones, still the
        PR's latest) are queued again to be re-measured on the new main."""
        for job_id in store.mark_stale(repo, main_sha):
            if store.is_merge_candidate(job_id):
                again = store.requeue(job_id)
                log.info("main moved to %s: re-measuring %s as job %s", main_sha[:10], job_id,
                         again.id)

    # ---- publication ----------------------------------------------------------------------
    def publish_pending(self, store: Store) -> None:
        for job in store.unpublished():
            if self._publish is None:
                store.mark_published(job.id)  # no GitHub: the outputs on disk are the result
                continue
            try:
                self._publish(store, job.id)
            except EvalbotError as exc:  # GitHub down: the next sweep tries again
                log.warning("job %s: publishing failed (%s); will retry", job.id, exc)
                return
            store.mark_published(job.id)

    # ---- the box --------------------------------------------------------------------------
    def _connected(self) -> Box:
        if self._box is None:
            self._box = open_box(self.box_config)
        return self._box

    def _drop_box(self) -> None:
        if self._box is not None:
            close_quietly(self._box)
        self._box = None


def _waiting(store: Store) -> bool:
    """Jobs some worker could still take: queued (back-off included) or running."""
    return any(j.state in ("queued", "running") for j in store.jobs())
