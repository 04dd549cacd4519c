"""Which finished jobs still have to reach GitHub, and why one never will.

A part of the job store (evalbot.store.jobs.Store inherits it). A failure that may pass puts the
job back with a back-off; one that will not (a locked conversation, a PR gone) is given up with
its reason, which `evalbot status --json` shows. Who may write a PR while it is published is the
claims' concern (evalbot.store.claims).

Back-off times here are on `time.monotonic()`, which every process of one host shares and which
no clock step moves; a reboot restarts it, so a store opened under another boot clears them.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from evalbot.store.columns import add_missing

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
ADDED = (  # (column, declaration) on jobs
    ("publish_tries", "INTEGER NOT NULL DEFAULT 0"),
    ("publish_due", "REAL NOT NULL DEFAULT 0"),  # monotonic: not tried again before
    ("unpublished", "TEXT NOT NULL DEFAULT ''"),  # why it was given up ('' : not given up)
)
_SELECT = ("SELECT * FROM jobs WHERE pr IS NOT NULL AND published IS NULL AND state IN "
           "('done','failed')")


def boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


class PublicationTables:
    db: sqlite3.Connection
    _tx: Callable[[], AbstractContextManager[sqlite3.Connection]]

    def publication_columns(self) -> None:
        add_missing(self.db, "jobs", ADDED)
        boot = boot_id()
        row = self.db.execute("SELECT value FROM meta WHERE key='boot_id'").fetchone()
        if row is None or row[0] != boot:  # a new monotonic clock: old deadlines mean nothing
            with self._tx() as db:
                db.execute("UPDATE jobs SET publish_due=0")
                db.execute("INSERT OR REPLACE INTO meta VALUES ('boot_id', ?)", (boot,))

    def due_unpublished(self, now: float | None = None) -> list[str]:
        """unpublished() whose back-off has passed."""
        now = time.monotonic() if now is None else now
        rows = self.db.execute(_SELECT + " AND unpublished='' AND publish_due<=? ORDER BY updated",
                               (now,))
        return [r["id"] for r in rows]

    def mark_published(self, job_id: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE jobs SET published=?, publish_tries=0, unpublished='' WHERE id=?",
                       (time.time(), job_id))

    def mark_unpublished(self, job_id: str) -> None:
        """Publish the job's verdict again at the next sweep (its comment has news: stale)."""
        with self._tx() as db:
            db.execute("UPDATE jobs SET published=NULL, publish_tries=0, publish_due=0, "
                       "unpublished='' WHERE id=?", (job_id,))

    def publish_later(self, job_id: str, first_s: float, cap_s: float = 300.0,
                      at_least_s: float = 0.0) -> float:
        """A failure that may pass: exponential back-off with jitter, capped; at_least_s is
        GitHub's own Retry-After or reset. Returns the wait."""
        with self._tx() as db:
            row = db.execute("SELECT publish_tries FROM jobs WHERE id=?", (job_id,)).fetchone()
            tries = 1 + int(row[0])
            wait = max(at_least_s, min(cap_s, first_s * 2 ** (tries - 1))
                       * random.uniform(0.5, 1.0))
            db.execute("UPDATE jobs SET publish_tries=?, publish_due=? WHERE id=?",
                       (tries, time.monotonic() + wait, job_id))
            return wait

    def give_up_publishing(self, job_id: str, reason: str) -> None:
        """A failure that will not pass (404, 409, 410, 422, a 403 that is no rate limit)."""
        with self._tx() as db:
            db.execute("UPDATE jobs SET unpublished=? WHERE id=?",
                       (reason[:300] or "refused", job_id))

    def given_up(self) -> list[tuple[str, int, str]]:
        """(job, PR, reason) of every finished job whose publication was given up."""
        rows = self.db.execute(_SELECT + " AND unpublished<>'' ORDER BY updated")
        return [(r["id"], int(r["pr"]), r["unpublished"]) for r in rows]
