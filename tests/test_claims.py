"""A PR's claim (evalbot/store/claims.py) is judged by its holder's process, never by a lease:
held while the holder lives and holds it, free the moment the process is gone (SIGKILL), or when
this process's own holder left the block without the store taking the release. Real processes,
a real SQLite file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalbot.store import claims
from evalbot.store.jobs import Store
from tests.service_env import wait_for

HOLD = """
import signal, sys
from evalbot.store.jobs import Store
store = Store(sys.argv[1])
assert store.claim("o/r#1", "other-worker")
print("held", flush=True)
signal.pause()  # holds the claim until the test kills it
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process on this host holding o/r#1."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "s.sqlite3")],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield proc
    proc.kill()
    proc.wait()


def test_a_live_holder_keeps_the_claim_and_a_killed_one_frees_it_at_once(
        tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    store = Store(tmp_path / "s.sqlite3")
    assert not store.claim("o/r#1", "worker")
    assert store.claimant("o/r#1") == "other-worker"
    assert store.claim("o/r#2", "worker")  # another PR is not held
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert store.claim("o/r#1", "worker")  # no lease to wait out
    store.close()


def test_a_pid_given_to_a_new_process_does_not_hold_the_old_claim(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    me = os.getpid()  # a live process, but not the one that took the claim: another start time
    store.db.execute("INSERT INTO claims VALUES ('o/r#1', 'old', ?, ?, '1', ?)",
                     (store.host, me, time.time()))
    assert store.claim("o/r#1", "worker")
    store.close()


def test_a_release_the_store_refused_does_not_hold_the_pr_for_good(tmp_path: Path) -> None:
    store, other = Store(tmp_path / "s.sqlite3"), Store(tmp_path / "s.sqlite3")
    assert store.claim("o/r#1", "dispatcher")
    assert not other.claim("o/r#1", "worker")  # held: this process's dispatcher holds it
    claims._holding.discard((str(store.path.resolve()), "o/r#1", "dispatcher"))  # what
    # unclaim does first; its DELETE then met a full disk and the row stayed
    assert store.claimant("o/r#1") == "dispatcher"
    assert other.claim("o/r#1", "worker")
    store.close()
    other.close()


def test_another_hosts_claim_stands_until_this_process_saw_it_unchanged_long_enough(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claims, "CROSS_HOST_S", 1.0)
    store = Store(tmp_path / "s.sqlite3")
    store.db.execute("INSERT INTO claims VALUES ('o/r#1', 'far', 'another-boot', 42, '7', ?)",
                     (time.time(),))
    assert not store.claim("o/r#1", "worker")  # its process cannot be asked from here
    wait_for("the other host's claim to be judged gone", lambda: store.claim("o/r#1", "worker"),
             timeout_s=30)
    store.close()
