"""A running job's lease, renewed on a thread of its own while the worker runs the job
(evalbot.service.worker); a lease no longer the worker's stops the run on the box. Before each
renewal, `watch` (evalbot.service.head_watch) may read the PR on GitHub and supersede the job,
so a push stops the run at that renewal even while the push's own `intake` job waits."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from evalbot.config.errors import EvalbotError
from evalbot.remote.box import BoxError
from evalbot.store.jobs import Store

log = logging.getLogger("evalbot.worker")  # the worker's name: the JSON logs carry it


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
