"""Who is writing one PR on GitHub right now: one claim per subject (`repo#PR`).

The store's claim methods (evalbot.store.jobs.Store.claim) ask this module. The dispatcher (admitting a head,
running a command) and the workers (publishing a verdict) claim the PR before they write to it
and let go after, so one PR's comment, labels and status are written by one of them at a time: a
verdict is never written over the pending state of a head admitted meanwhile, since the worker
checks inside its claim that its job is still the PR's latest (evalbot.github.service).

A claim names its holder's process: the host (its boot id), the pid and the process's start
time. On the holder's host a claim whose process is gone is free at once, so a service restarted
after SIGKILL publishes without waiting for anything to expire; one left by this very process (a
release the store refused: disk full) is free once its holder is out of the block that took it.
`holder_gone` is the one place that judges a claim; a claim from another host cannot be judged by
its process, and stands until this process has seen it unchanged for CROSS_HOST_S by its own
monotonic clock (no clock is compared between hosts). A claim left from before this host's last
reboot (another boot id) is judged as another host's.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

from evalbot.store.leasing import HOST

CROSS_HOST_S = 300.0
_seen: dict[tuple[str, str, str], float] = {}  # (store, subject, holder) -> first seen (monotonic)
_holding: set[tuple[str, str, str]] = set()  # (store, subject, owner) this process holds now
_lock = threading.Lock()


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat, field 22): with the
    pid it names one process, never a later one given the same pid. None: no such process, or a
    zombie (dead, not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
    return None if fields[0] in ("Z", "X") else fields[19]


_starts: dict[int, str] = {}  # this process's start, by pid (a forked child is another)


def my_start() -> str:
    pid = os.getpid()
    if pid not in _starts:
        _starts[pid] = process_start(pid) or ""
    return _starts[pid]


def holder_gone(store: str, row: sqlite3.Row, host: str = HOST) -> bool:
    """Whether a claim's holder no longer holds it, as seen from this process."""
    if (row["host"], row["pid"], row["started"]) == (host, os.getpid(), my_start()):
        with _lock:
            return (store, row["subject"], row["owner"]) not in _holding
    if row["host"] == host:  # one boot of this host: /proc is there (leasing.HOST read it)
        return process_start(int(row["pid"])) != row["started"]
    key = (store, row["subject"], f"{row['host']}:{row['pid']}:{row['at']}")
    now = time.monotonic()
    with _lock:
        since = _seen.setdefault(key, now)
    return now - since >= CROSS_HOST_S


def holding(store: str, subject: str, owner: str, held: bool) -> None:
    """Note that this process now holds (or has let go of) a claim, as `holder_gone` reads it."""
    with _lock:
        (_holding.add if held else _holding.discard)((store, subject, owner))
