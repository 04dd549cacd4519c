"""When a lease has expired, without trusting the wall clock.

A lease carries its time-to-live, a heartbeat (`lease_beat`, bumped by the store on every lease
and renewal), the holder's host (its kernel boot id) and the holder's monotonic clock at the last
beat. Whoever wants the job decides:

- on the holder's host (same boot id: CLOCK_MONOTONIC is one clock for every process there), the
  lease is expired when the monotonic clock has passed the last beat by the TTL;
- on another host, when this process has seen the same heartbeat unchanged for the TTL by its own
  monotonic clock (a new observer waits one TTL before it takes a dead worker's job).

A step of the wall clock, forward or back, on any host changes neither. `lease_expires` (wall
clock) is still written, for display only. A drain's hand-back sets the TTL to 0: expired at once.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from pathlib import Path


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or uuid.uuid4().hex
    except OSError:  # no shared monotonic clock we can name: every process is its own host
        return uuid.uuid4().hex


HOST = _boot_id()
_seen: dict[tuple[str, str], tuple[int, float]] = {}  # (store, job) -> (beat, first seen)
_seen_lock = threading.Lock()


def beat_columns(ttl_s: float) -> tuple[str, tuple[float, str, float]]:
    """The SET clause (and its values) that starts or renews a lease from this process."""
    return ("lease_ttl=?, lease_host=?, lease_mono=?, lease_beat=lease_beat+1",
            (ttl_s, HOST, time.monotonic()))


def expired(store: str, row: sqlite3.Row, host: str = HOST) -> bool:
    """Whether the running job's lease has expired, as seen from this process."""
    ttl = row["lease_ttl"]
    if ttl is None:  # leased before leases carried a heartbeat: the wall clock is all we have
        return row["lease_expires"] is not None and row["lease_expires"] < time.time()
    now = time.monotonic()
    if ttl <= 0:
        return True
    if row["lease_host"] == host:
        return now - float(row["lease_mono"]) >= ttl
    key = (store, row["id"])
    with _seen_lock:
        beat, since = _seen.get(key, (None, now))
        if beat != row["lease_beat"]:
            _seen[key] = (row["lease_beat"], now)
            return False
    return now - since >= ttl


def first_expired(store: str, db: sqlite3.Connection, host: str = HOST) -> sqlite3.Row | None:
    """The running job whose lease expired, if any (oldest beat first)."""
    rows = db.execute("SELECT * FROM jobs WHERE state='running' ORDER BY lease_mono, "
                      "rowid").fetchall()
    return next((r for r in rows if expired(store, r, host)), None)


def fairest(db: sqlite3.Connection, now: float) -> sqlite3.Row | None:
    """The queued job whose author, then PR, was served longest ago (never served: first)."""
    return db.execute(
        "SELECT j.* FROM jobs j LEFT JOIN admissions a ON a.job_id=j.id "
        "WHERE j.state='queued' AND j.not_before<=? ORDER BY "
        "(SELECT COALESCE(MAX(l.started), 0) FROM leases l JOIN admissions b ON b.job_id=l.job_id"
        " WHERE b.author=COALESCE(a.author, '') AND b.repo=j.repo), "
        "(SELECT COALESCE(MAX(l.started), 0) FROM leases l JOIN jobs k ON k.id=l.job_id "
        " WHERE k.repo=j.repo AND k.pr IS j.pr), j.created, j.rowid LIMIT 1", (now,)).fetchone()


def end_lease(db: sqlite3.Connection, job_id: str, worker: str, outcome: str,
              now: float | None = None) -> float:
    """Close the worker's open lease interval on the job; returns its length in seconds."""
    now = time.time() if now is None else now
    row = db.execute("SELECT id, started FROM leases WHERE job_id=? AND worker=? AND ended IS "
                     "NULL ORDER BY id DESC LIMIT 1", (job_id, worker)).fetchone()
    if row is None:
        return 0.0
    db.execute("UPDATE leases SET ended=?, outcome=? WHERE id=?", (now, outcome, row["id"]))
    return now - float(row["started"])
