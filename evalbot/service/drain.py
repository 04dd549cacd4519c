"""Stopping the service without losing work: on SIGTERM, drain the workers.

1. Every worker stops taking jobs (its `stopping` event is set).
2. Jobs in flight get `grace_s` to finish and be recorded as usual.
3. The leases still held then are handed back (`Store.hand_back`): they are made to expire now, so
   the next `lease` (after the restart, or by another worker) takes them first, and the
   hand-back is not counted as a try (`tries` counts leases that ended by a failure or a dead
   worker; a restart is neither, so restarts never make a job give up). Nothing on the box is
   stopped: the harness runs detached and keeps measuring; the next worker re-attaches to it
   through its job directory (pipeline.launch) and fetches the same results. The lease owner is
   not cleared, so the old worker's Renewal can never take the hand-back for a lost job and kill
   the run; a Renewal stops renewing a lease handed back while its worker stops.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from evalbot.store.jobs import Store

DEFAULT_GRACE_S = 60.0  # leave room inside systemd's default 90 s TimeoutStopSec


class Stoppable(Protocol):
    name: str
    stopping: threading.Event


@dataclass
class DrainReport:
    finished: list[str] = field(default_factory=list)  # in flight at SIGTERM, done in the grace
    handed_back: list[str] = field(default_factory=list)  # leases expired for the next worker


def in_flight(store: Store, names: set[str]) -> list[str]:
    return [j.id for j in store.jobs("running") if j.lease_owner in names]


def drain(store_path: Path, workers: Sequence[Stoppable], grace_s: float = DEFAULT_GRACE_S,
          poll_s: float = 0.2, clock: Callable[[], float] = time.monotonic) -> DrainReport:
    """Stop the workers, wait up to grace_s for their jobs, hand back the rest."""
    for w in workers:
        w.stopping.set()
    names = {w.name for w in workers}
    store = Store(store_path)
    try:
        at_start = in_flight(store, names)
        deadline = clock() + grace_s
        while in_flight(store, names) and clock() < deadline:
            time.sleep(poll_s)
        report = DrainReport()
        left = {j.id: j for j in store.jobs("running") if j.lease_owner in names}
        for job_id, job in left.items():
            assert job.lease_owner is not None
            if store.hand_back(job_id, job.lease_owner):
                report.handed_back.append(job_id)
        report.finished = [j for j in at_start if j not in left]
        return report
    finally:
        store.close()


def on_signals(signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT)) -> threading.Event:
    """An event set by SIGTERM/SIGINT; install from the main thread before starting workers."""
    stop = threading.Event()

    def handler(_sig: int, _frame: object) -> None:
        stop.set()

    for sig in signals:
        signal.signal(sig, handler)
    return stop
