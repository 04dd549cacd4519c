"""`evalbot demo`'s two lanes share the demo's one store (evalbot/evaluation/demo.py `LaneStore`).

An evaluation enqueues its job and leases at once, and a lease takes the fairest queued job: two
lanes enqueuing and leasing side by side could each lease the other's job (evaluate() then stops:
"another job is queued ahead"). They take turns from an enqueue to its lease. The lanes' order
in the demo (every PR's verdict, the dashboard's run pages) is tests/test_demo_e2e.py's and
bench/demo_under_load.py's.
"""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evalbot.evaluation.demo import LANES, LaneStore
from evalbot.store.jobs import Store

# How long lane A, between its enqueue and its lease, gives lane B to lease first. B cannot while
# A holds the turn, whatever the deadline; without turns B leases A's job (the oldest) at once,
# and a deadline this long sees it on a busy machine too.
B_FIRST_S = 2.0


def test_a_lane_between_its_enqueue_and_its_lease_keeps_its_job(tmp_path: Path) -> None:
    path = tmp_path / "evalbot.sqlite3"
    Store(path).close()  # the tables, made once before the lanes open them (as run_demo does)
    turn = threading.Lock()
    a_enqueued, b_leased = threading.Event(), threading.Event()

    def lane_a() -> tuple[str, str | None]:
        store = LaneStore(path, turn)
        try:
            row = store.enqueue("demo/engine", 1, "a" * 40, "default")
            a_enqueued.set()
            b_leased.wait(B_FIRST_S)  # B's chance to take the oldest queued job: A's
            leased = store.lease("lane-a", ttl_s=60, box="local")
            return row.id, leased.id if leased else None
        finally:
            store.close()

    def lane_b() -> tuple[str, str | None]:
        store = LaneStore(path, turn)
        try:
            assert a_enqueued.wait(300)
            row = store.enqueue("demo/engine", 2, "b" * 40, "default")
            leased = store.lease("lane-b", ttl_s=60, box="local")
            b_leased.set()
            return row.id, leased.id if leased else None
        finally:
            store.close()

    with ThreadPoolExecutor(2) as pool:
        lanes = [pool.submit(lane_a), pool.submit(lane_b)]
        (a_job, a_leased), (b_job, b_leased_id) = (lane.result(timeout=300) for lane in lanes)
    assert (a_leased, b_leased_id) == (a_job, b_job)  # each lane its own job
    assert not turn.locked()  # every turn passed on


def test_a_failed_enqueue_passes_the_turn_on(tmp_path: Path) -> None:
    # a lane whose enqueue fails (its store gone) must not leave the other lane waiting forever
    turn = threading.Lock()
    store = LaneStore(tmp_path / "evalbot.sqlite3", turn)
    store.close()
    with pytest.raises(sqlite3.ProgrammingError):
        store.enqueue("demo/engine", 1, "a" * 40, "default")
    assert not turn.locked()


def test_every_demo_pr_is_in_one_lane() -> None:
    names = [name for lane in LANES for name in lane]
    assert sorted(names) == sorted(["faster", "neutral", "slow_long", "broken"])
