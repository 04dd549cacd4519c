"""Leases against a stepped wall clock: a live lease is never taken, a dead one always is.

The holder is a real second process on this host renewing its lease as a worker does; the
taker is this process, whose wall clock jumps an hour (NTP after a suspend, an operator's
`date -s`). Expiry is decided by heartbeats and monotonic clocks (evalbot/store/leasing.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalbot.store.jobs import JobRow, Store
from tests.service_env import wait_for

A, B = "a" * 40, "b" * 40
TTL = 5.0
_HOLDER = """
import sys, time
from evalbot.store.jobs import Store
store = Store(sys.argv[1])
job = store.lease("holder", float(sys.argv[2]))
print(job.id, flush=True)
while store.renew(job.id, "holder", float(sys.argv[2])):
    time.sleep(0.2)
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Store, subprocess.Popen[str], str]]:
    path = tmp_path / "evalbot.sqlite3"
    store = Store(path)
    store.enqueue("o/r", 1, A, "p")
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), str(TTL)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    job_id = proc.stdout.readline().strip()
    yield store, proc, job_id
    proc.kill()
    proc.wait()
    store.close()


def _beats(store: Store, job_id: str, n: int) -> None:
    """Wait until the holder has renewed n more times (it is alive and beating)."""
    def beat() -> int:
        return int(store.db.execute("SELECT lease_beat FROM jobs WHERE id=?",
                                    (job_id,)).fetchone()[0])
    start = beat()
    wait_for(f"{n} more renewals of the holder", lambda: beat() >= start + n, 60.0)


def _step(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + seconds)


@pytest.mark.parametrize("host", ["this", "another"])
@pytest.mark.parametrize("step_s", [3600.0, -3600.0])
def test_a_clock_step_never_hands_a_live_lease_to_another_worker(
        holder: tuple[Store, subprocess.Popen[str], str], monkeypatch: pytest.MonkeyPatch,
        host: str, step_s: float) -> None:
    store, proc, job_id = holder
    if host == "another":
        store.host = "another-box"  # no shared monotonic clock: it must watch the heartbeat
    _step(monkeypatch, step_s)
    for _ in range(3):  # over several renewals, and well past the TTL for the "another" taker
        assert store.lease("taker", TTL) is None
        _beats(store, job_id, 2)
    assert store.lease("taker", TTL) is None
    row = store.get(job_id)
    assert (row.state, row.lease_owner, row.tries) == ("running", "holder", 1)
    assert proc.poll() is None  # its renewals all succeeded: the lease stayed its own


@pytest.mark.parametrize("host", ["this", "another"])
def test_a_dead_workers_lease_is_taken_after_its_ttl_despite_a_backward_step(
        holder: tuple[Store, subprocess.Popen[str], str], monkeypatch: pytest.MonkeyPatch,
        host: str) -> None:
    store, proc, job_id = holder
    if host == "another":
        store.host = "another-box"
    _beats(store, job_id, 1)
    proc.kill()  # SIGKILL: no more renewals
    proc.wait()
    _step(monkeypatch, -3600.0)  # by the wall clock the lease would now last another hour
    taken = wait_for("the dead holder's job", lambda: store.lease("taker", TTL), 60.0)
    assert isinstance(taken, JobRow) and taken.id == job_id
    row = store.get(job_id)
    assert (row.state, row.lease_owner, row.tries) == ("running", "taker", 2)
    outcomes = [(lease["worker"], lease["outcome"]) for lease in store.leases(job_id)]
    assert outcomes == [("holder", "expired"), ("taker", None)]
    assert not store.renew(job_id, "holder", TTL)


def test_a_drain_hand_back_is_taken_at_once_from_another_host(tmp_path: Path) -> None:

    store = Store(tmp_path / "evalbot.sqlite3")
    job = store.enqueue("o/r", 2, B, "p")
    assert store.lease("w1", 3600) is not None
    assert store.hand_back(job.id, "w1")
    other = Store(tmp_path / "evalbot.sqlite3")
    other.host = "another-box"
    taken = other.lease("w2", 60)
    assert taken is not None and taken.id == job.id and taken.lease_owner == "w2"
