"""The job store on a real SQLite file: idempotent keys, supersede, leases, history."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from evalbot.store.jobs import Store
from tests.verdict_doc import verdict_doc

A, B, C = "a" * 40, "b" * 40, "c" * 40


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "evalbot.sqlite3")


def _verdict(head: str) -> dict:
    return verdict_doc("eval:M", "improved", base_sha=C, head_sha=head)


def test_enqueue_is_idempotent_per_key(store: Store) -> None:
    first = store.enqueue("o/r", 7, A, "default@1")
    again = store.enqueue("o/r", 7, A, "default@1")
    assert first.id == again.id and len(store.jobs()) == 1
    rerun = store.enqueue("o/r", 7, A, "default@1", attempt=2)
    assert rerun.id != first.id


def test_new_head_supersedes_the_prs_older_jobs_only(store: Store) -> None:
    old = store.enqueue("o/r", 7, A, "default@1")
    other_pr = store.enqueue("o/r", 8, A, "default@1")
    new = store.enqueue("o/r", 7, B, "default@1")
    assert store.get(old.id).state == "superseded"
    assert store.get(other_pr.id).state == "queued"
    assert store.get(new.id).state == "queued"


def test_lease_takes_oldest_and_expired_leases_return(store: Store) -> None:
    job = store.enqueue("o/r", 1, A, "p")
    store.enqueue("o/r", 2, B, "p")
    leased = store.lease("w1", ttl_s=0.05)
    assert leased is not None and leased.id == job.id and leased.state == "running"
    time.sleep(0.1)
    again = store.lease("w2", ttl_s=60)
    assert again is not None and again.id == job.id and again.tries == 2
    assert not store.renew(job.id, "w1", 60)  # the dead worker lost it
    assert not store.finish(job.id, "w1", _verdict(A), {})
    assert store.finish(job.id, "w2", _verdict(A), {"x": 1})
    assert store.get(job.id).state == "done"


def test_fail_with_retry_requeues_and_without_fails(store: Store) -> None:
    job = store.enqueue("o/r", 1, A, "p")
    store.lease("w", 60)
    store.fail(job.id, "w", "box unreachable", retry=True)
    assert store.get(job.id).state == "queued"
    store.lease("w", 60)
    store.fail(job.id, "w", "box unreachable", retry=False)
    row = store.get(job.id)
    assert (row.state, row.reason) == ("failed", "box unreachable")


def test_cancel_and_history_queries(store: Store) -> None:
    done = store.enqueue("o/r", 1, A, "p")
    store.lease("w", 60)
    store.finish(done.id, "w", _verdict(A), {"r": 1})
    queued = store.enqueue("o/r", 2, B, "p")
    assert store.cancel("o/r", 2) == 1 and store.get(queued.id).state == "cancelled"
    assert [h["job_id"] for h in store.history(pr=1)] == [done.id]
    assert store.history(sha=A[:8])[0]["results"] == {"r": 1}
    assert store.history(pr=2) == []


def test_deliveries_are_deduplicated(store: Store) -> None:
    assert store.first_delivery("d-1")
    assert not store.first_delivery("d-1")


def test_state_survives_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    first = Store(path)
    job = first.enqueue("o/r", 1, A, "p")
    first.close()
    second = Store(path)
    assert second.get(job.id).state == "queued"
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
