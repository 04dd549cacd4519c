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
- a verdict is recorded (signed, when the config names a key) before it is published, and
  every finished job not yet published is published again by the next sweep (publication is
  idempotent);
- a box whose last health check failed gets no jobs; when idle, the worker runs the box's
  periodic A/A (evalbot.service.health) once it is due;
- a `/evalbot measure-more` job runs the earlier job's SHAs with a scaled pair budget and is
  graded on both runs' samples pooled (evalbot.grading.overrides).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalbot.audit.signing import SigningKey, sign_verdict
from evalbot.config.errors import EvalbotError, PipelineError, ResultsError
from evalbot.config.settings import BoxConfig
from evalbot.evaluation import pipeline
from evalbot.evaluation.evaluate import failure_verdict, record_outputs
from evalbot.evaluation.jobspec import CALIBRATION_DF, WITNESS_FLOOR, make_job
from evalbot.evaluation.profile import Profile
from evalbot.github.hold import Hold
from evalbot.grading.grade import grade
from evalbot.grading.overrides import pool, scale_job
from evalbot.grading.policy import Policy
from evalbot.remote.box import Box, BoxError
from evalbot.report.publication import keep_raw, private_dir, public_verdict
from evalbot.report.witness_floors import stale_witnesses
from evalbot.service.calibrate import calibration_job
from evalbot.service.health import SICK_RECHECK_S, aa_due, periodic_aa, record_check
from evalbot.service.pool import close_quietly, open_box, resolve_main, stop_run
from evalbot.service.publishing import FIRST_RETRY_S, publish_pending
from evalbot.store.health import Health, HealthStore
from evalbot.store.jobs import JobRow, Store
from evalbot.store.noise import NoiseStore
from evalbot.store.overrides import Overrides
from evalbot.store.schema import Error as StoreError
from evalbot.store.schema import passing_fault

log = logging.getLogger("evalbot.worker")  # the JSON logs carry this name: kept from before evalbot.service
Publish = Callable[[Store, str], None]  # publish one finished job's final state to its PR


@dataclass(frozen=True)
class Settings:
    lease_ttl_s: float = 120.0  # a dead worker's job returns to the queue after this
    max_tries: int = 3  # leases of one job, crashed workers included
    backoff_s: float = 60.0  # first retry delay after an infra failure; doubles per try
    poll_s: float = 1.0  # idle wait between looks at the queue
    job_timeout_s: float = 6 * 3600.0
    follow_poll_s: float = 0.5
    aa_every_s: float = 0.0  # periodic A/A per box when idle (config service.aa_every_h); 0: off
    aa_pairs: int = 12
    publish_retry_s: float = FIRST_RETRY_S  # config service.publish_retry_s


class Worker:
    def __init__(self, name: str, box_config: BoxConfig, profile: Profile, policy: Policy,
                 store_path: Path, out_root: Path, settings: Settings,
                 publish: Publish | None = None, render: Callable[[dict[str, Any]], str]
                 | None = None, signer: SigningKey | None = None,
                 notify: Callable[[str], None] | None = None) -> None:
        self.name, self.box_config, self.profile, self.policy = name, box_config, profile, policy
        self.store_path, self.out_root, self.settings = store_path, out_root, settings
        self._publish, self._render, self.signer = publish, render, signer
        self.notify = notify or (lambda text: log.error("%s", text))
        self.stopping = threading.Event()
        # Called with each job as it starts, and this worker's box name (Actions mode links
        # the PR's status to the run: evalbot.service.serve.ActionsRun).
        self.on_start: Callable[[JobRow, str], None] = lambda _job, _box: None
        # Read at each renewal: the PR's head on GitHub (`--watch-pushes`, head_watch.py).
        self.head_watch: Callable[[Store, JobRow], object] | None = None
        self._box: Box | None = None
        self.store_hold, self.publishing_hold = Hold(), Hold()  # after a store fault
        self.started = time.time()  # a box never checked gets its first A/A one period later
        self._stale: frozenset[str] | None = None  # stale witness floors; None: read the store

    # ---- the loop -------------------------------------------------------------------------
    def run(self, until_idle: bool = False) -> int:
        """Work until stopped (or, with until_idle, until the queue is empty); jobs handled."""
        store, handled = Store(self.store_path), 0
        try:
            while not self.stopping.is_set():
                turn = self._guarded(store, until_idle)
                if turn is None:
                    break
                handled += turn
        finally:
            store.close()
            if self._box is not None:
                close_quietly(self._box)
        return handled

    def _guarded(self, store: Store, until_idle: bool) -> int | None:
        """One turn; a store that fails (locked, full, I/O) holds the worker back a while
        instead of ending it (a lease held meanwhile expires and is taken again)."""
        try:
            turn = self._turn(store, until_idle)
        except StoreError as exc:
            if passing_fault(exc) is None:
                raise
            wait = self.store_hold.fault()
            log.warning("%s: the store failed (%s); again in %.0f s", self.name, exc, wait)
            self.stopping.wait(wait)
            return 0
        self.store_hold.clear()
        return turn

    def _turn(self, store: Store, until_idle: bool) -> int | None:
        """Publish, then one job (1) or an idle wait (0); None: idle under until_idle."""
        self.publish_pending(store)
        if self.step(store):
            return 1
        if until_idle and not _waiting(store):
            return None
        if not until_idle and self.health_check_due():
            self.check_health()
        else:
            self.stopping.wait(self.settings.poll_s)
        return 0

    def step(self, store: Store) -> bool:
        """Lease and handle one job; False when there was none (or the box is unhealthy)."""
        if not self.healthy():
            return False
        job = store.lease(self.name, self.settings.lease_ttl_s, box=self.box_config.name)
        if job is None:
            return False
        log.info("%s: job %s (%s #%s %s), try %d", self.name, job.id, job.repo, job.pr,
                 job.head_sha[:10], job.tries)
        self.on_start(job, self.box_config.name)
        watch = self.head_watch
        renewal = Renewal(self.store_path, job.id, self.name, self.settings.lease_ttl_s,
                          lambda: stop_run(open_box(self.box_config), self.box_config, job.id),
                          self.stopping, None if watch is None else lambda s: watch(s, job))
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
        earlier, factor = self._measure_more(store, job)
        if earlier is not None:  # the same SHAs as the run it adds samples to
            base = earlier["base"]["sha"]
        else:
            base = job.base_sha if job.started and job.base_sha else \
                resolve_main(box, self.box_config)
        store.set_base(job.id, base)
        if earlier is None:  # an earlier run's base says nothing about where main is now
            self._main_moved(store, job.repo, base)
        floors, floor_df, witness_df = self._floors(earlier)
        spec = make_job(self.profile, self.policy, self.box_config, base, job.head_sha,
                        job_id=job.id, sd_floors=floors, floor_df=floor_df,
                        witness_df=witness_df, stale_witnesses=self._stale_witnesses(True))
        self._stale = None  # this job's pairs may change it: read again when next asked
        if factor > 1.0:
            spec = scale_job(spec, factor)
        out = self.out_root / job.id
        out.mkdir(parents=True, exist_ok=True)
        results = pipeline.evaluate(box, self.box_config, spec, private_dir(out),
                                    poll_s=self.settings.follow_poll_s,
                                    timeout_s=self.settings.job_timeout_s)
        if renewal.lost.is_set():
            return
        if earlier is not None:
            results = _pooled(earlier, results, out)
        try:
            judged = grade(results, self.policy)  # its reasons in full: the operator's
            verdict = self._sign(public_verdict(judged))  # as it is stored and published
        except Exception as exc:  # a results file grading refuses, or a verdict signing refuses
            log.exception("%s: job %s could not be graded", self.name, job.id)
            raise PipelineError(f"grading failed ({type(exc).__name__}): {exc}") from exc
        reason = "; ".join(judged["reasons"]) or "infra-error"
        if verdict["kind"] == "infra-error" and job.tries < self.settings.max_tries:
            self._retry(store, job, reason)
            return
        done = store.finish(job.id, self.name, verdict, results) if verdict["kind"] != \
            "infra-error" else store.fail(job.id, self.name, reason, retry=False,
                                          verdict=verdict, results=results) == "failed"
        if done:
            record_outputs(out, verdict, self._render, results)

    def _infra(self, store: Store, job: JobRow, reason: str, renewal: Renewal) -> None:
        """A failure that is not the PR's: retry later, or give up and say so after the last."""
        if renewal.lost.is_set():
            return  # superseded or cancelled: the failure is the kill we caused
        self._drop_box()  # reconnect from scratch for the next job
        log.warning("%s: job %s try %d: %s", self.name, job.id, job.tries, reason)
        if job.tries < self.settings.max_tries:
            self._retry(store, job, reason)
            return
        verdict = self._sign(failure_verdict(job, self.policy, self.profile.name,
                                             f"{reason} (gave up after {job.tries} attempts)"))
        if store.fail(job.id, self.name, reason, retry=False, verdict=verdict) == "failed":
            record_outputs(self.out_root / job.id, verdict, self._render)

    def _retry(self, store: Store, job: JobRow, reason: str) -> None:
        wait = self.settings.backoff_s * 2 ** (job.tries - 1)
        store.fail(job.id, self.name, reason, retry=True, backoff_s=wait)

    def _main_moved(self, store: Store, repo: str, main_sha: str) -> None:
        """Verdicts against an older main go stale; merge candidates (improved ones, still the
        PR's latest) are queued again to be re-measured on the new main; the others are
        published again, so their comment says main moved (evalbot.github.service)."""
        for job_id in store.mark_stale(repo, main_sha):
            if store.is_merge_candidate(job_id):
                again = store.requeue(job_id)
                log.info("main moved to %s: re-measuring %s as job %s", main_sha[:10], job_id,
                         again.id)
            else:
                store.mark_unpublished(job_id)

    def _sign(self, verdict: dict[str, Any]) -> dict[str, Any]:
        return verdict if self.signer is None else sign_verdict(verdict, self.signer)

    # ---- measure more -----------------------------------------------------------------------
    def _measure_more(self, store: Store, job: JobRow) -> tuple[dict[str, Any] | None, float]:
        """The earlier run's results to pool with (None: nothing to pool) and the budget factor
        (1: an ordinary job)."""
        book = Overrides(self.store_path)
        try:
            plan = book.plan(job.id)
        finally:
            book.close()
        if plan is None:
            return None, 1.0
        found = [h["results"] for h in store.history(job.repo, job.pr, job.head_sha)
                 if h["job_id"] == plan.earlier_job]
        box = found[0].get("box", {}).get("name") if found and found[0] else None
        if box != self.box_config.name:  # another box measures something else: no pooling
            log.warning("job %s: measure-more without pooling (earlier run %s on box %s)",
                        job.id, plan.earlier_job, box)
            return None, plan.factor
        return found[0], plan.factor

    def _floors(self, earlier: dict[str, Any] | None) -> tuple[dict[str, float], int, int]:
        """The box's calibrated noise floors, their degrees of freedom and the witnesses' (for
        make_job). A measure-more keeps the earlier run's cell floors, so both runs' samples are
        judged by one rule; its witnesses are judged alone (the pooled results keep the later
        run's), with the box's floors as any job's."""
        noise = NoiseStore(self.store_path)
        try:
            stored = noise.floors(self.box_config.name, self.profile.name)
            degrees = noise.degrees(self.box_config.name, self.profile.name) or CALIBRATION_DF
        finally:
            noise.close()
        if earlier is None:
            return stored, degrees, degrees
        rule = earlier["rule"]
        calibrated = rule.get("calibrated")
        floors = dict(rule.get("sd_floors") or {})
        if calibrated is not None:  # the profile's own per-cell floors come back by themselves
            floors = {k: v for k, v in floors.items() if k in calibrated}
        floors |= {k: v for k, v in stored.items() if k.startswith(WITNESS_FLOOR)}
        return floors, int(rule.get("pool_df") or CALIBRATION_DF), degrees

    # ---- box health -------------------------------------------------------------------------
    def _last_health(self) -> Health | None:
        health = HealthStore(self.store_path)
        try:
            return health.latest().get(self.box_config.name)
        finally:
            health.close()

    def healthy(self) -> bool:
        last = self._last_health()
        return last is None or last.healthy

    def health_check_due(self) -> bool:
        """The periodic A/A is due; with a witness floor stale, within the hour (as after a
        failed check): until it measures the floor again, that witness confirms nothing."""
        every = self.settings.aa_every_s
        soon = every > 0 and bool(self._stale_witnesses())
        return aa_due(self._last_health(), min(every, SICK_RECHECK_S) if soon else every,
                      self.started, time.time())

    def _stale_witnesses(self, fresh: bool = False) -> frozenset[str]:
        """The witnesses whose floor on this box its recent pairs refute: not run, no tier."""
        if fresh or self._stale is None:
            self._stale = stale_witnesses(self.store_path, self.box_config.name,
                                          self.profile.name)
        return self._stale

    def check_health(self) -> Health:
        """The box's periodic A/A on main, between jobs (the harness holds the box lock); it
        measures again the floors of the witnesses whose floor is stale."""
        out = self.out_root / "aa" / f"{self.box_config.name}-{time.strftime('%Y%m%dT%H%M%S')}"
        stale, self._stale = self._stale_witnesses(True), None  # measured again below
        try:
            box = self._connected()
            job = calibration_job(self.profile, self.policy, self.box_config,
                                  resolve_main(box, self.box_config), self.settings.aa_pairs,
                                  witnesses=bool(stale), only=stale)
        except (EvalbotError, BoxError) as exc:  # recorded like an A/A that failed to run
            self._drop_box()
            return record_check(self.store_path, Health(
                self.box_config.name, self.profile.name, False, (f"A/A could not start: {exc}",),
                None), self.notify)
        health = periodic_aa(box, self.box_config, job, self.profile.name, self.store_path, out,
                             notify=self.notify)
        log.info("%s: A/A on %s: %s", self.name, self.box_config.name,
                 "healthy" if health.healthy else "; ".join(health.reasons))
        return health

    # ---- publication ----------------------------------------------------------------------
    def publish_pending(self, store: Store) -> None:
        """Every finished job not yet on GitHub; one PR's failure holds back no other's."""
        publish_pending(store, self._publish, self.name, self.settings.publish_retry_s,
                        hold=self.publishing_hold)

    # ---- the box --------------------------------------------------------------------------
    def _connected(self) -> Box:
        if self._box is None:
            self._box = open_box(self.box_config)
        return self._box

    def _drop_box(self) -> None:
        if self._box is not None:
            close_quietly(self._box)
        self._box = None


def _pooled(earlier: dict[str, Any], later: dict[str, Any], out: Path) -> dict[str, Any]:
    """Both runs' samples in one results document (kept next to the run's own), or the
    later run alone when they cannot be pooled (e.g. the earlier run failed)."""
    try:
        doc = pool(earlier, later)
    except ResultsError as exc:
        log.warning("%s; grading the new run alone", exc)
        return later
    keep_raw(out, "results.pooled.json", doc)  # raw, as the run's own: never published
    return doc


def _waiting(store: Store) -> bool:
    """Jobs some worker could still take: queued (back-off included) or running."""
    return any(j.state in ("queued", "running") for j in store.jobs())


# ---- a running job's lease, renewed on a thread of its own while the worker runs the job; a
# lease no longer the worker's stops the run on the box. Before each renewal, `watch`
# (evalbot.service.head_watch) may read the PR on GitHub and supersede the job, so a push stops
# the run at that renewal even while the push's own `intake` job waits.
class Renewal:
    """Renews the lease on its own thread (and its own SQLite connection); when the job is no
    longer ours it kills the run on the box, so the pipeline's follow loop ends at once."""

    def __init__(self, store_path: Path, job_id: str, worker: str, lease_ttl_s: float,
                 on_lost: Callable[[], object], stopping: threading.Event | None = None,
                 watch: Callable[[Store], object] | None = None) -> None:
        self.store_path, self.job_id, self.worker, self.watch = store_path, job_id, worker, watch
        self.lease_ttl_s, self.on_lost = lease_ttl_s, on_lost
        self.stopping = stopping or threading.Event()
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
            while not self._stop.wait(self.lease_ttl_s / 3):
                if self.stopping.is_set() and _handed_back(store, self.job_id):
                    return  # the drain gave the lease to the next worker: keep it expired
                if self.watch is not None and not self.stopping.is_set():
                    self._watch(self.watch, store)
                if not store.renew(self.job_id, self.worker, self.lease_ttl_s):
                    self.lost.set()
                    if not self.stopping.is_set():  # draining: the run is the next worker's
                        self._stop_box_run()
                    return
        finally:
            store.close()

    def _watch(self, watch: Callable[[Store], object], store: Store) -> None:
        try:
            watch(store)
        except Exception:  # the store or a bug: the evaluation goes on, the lease is renewed
            log.exception("job %s: the PR's head could not be checked", self.job_id)

    def _stop_box_run(self) -> None:
        try:
            self.on_lost()
        except (BoxError, EvalbotError) as exc:
            log.warning("job %s: could not stop its run on the box: %s", self.job_id, exc)


def _handed_back(store: Store, job_id: str) -> bool:
    """The job's lease was expired by a drain (evalbot.service.drain.hand_back) while we still own it."""
    row = store.get(job_id)
    return row.state == "running" and row.lease_ttl == 0  # not the wall clock: leasing.py
