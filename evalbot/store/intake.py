"""The GitHub intake's tables in the store file: the webhook inbox, admissions, rate-limited notes.

A part of the job store (evalbot.store.jobs.Store inherits it): the same connection and
transactions; kept apart so each module holds one concern.

The inbox is ordered by the store's own sequence (rowid), never by a clock: a clock stepped back
cannot put an older push behind a newer one. Each delivery names its subject (`repo#PR`); only
the oldest delivery of a subject may be handled, so one PR's events stay in order, while a
delivery that failed (GitHub answering 5xx for that PR) waits out its back-off without holding
any other PR's deliveries behind it.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from evalbot.store.columns import add_missing


class IntakeTables:
    """Inbox (at-least-once deliveries for the dispatcher), admissions, notes (evalbot/github)."""

    # the store's connection and its BEGIN IMMEDIATE transaction (evalbot.store.jobs.Store)
    db: sqlite3.Connection
    _tx: Callable[[], AbstractContextManager[sqlite3.Connection]]

    _GITHUB_DDL = """
    CREATE TABLE IF NOT EXISTS inbox (delivery TEXT PRIMARY KEY, event TEXT NOT NULL,
                                      body BLOB NOT NULL, received REAL NOT NULL);
    CREATE TABLE IF NOT EXISTS inbox_aside (delivery TEXT PRIMARY KEY, event TEXT NOT NULL,
                                            body BLOB NOT NULL, received REAL NOT NULL,
                                            error TEXT NOT NULL, at REAL NOT NULL);
    CREATE TABLE IF NOT EXISTS admissions (job_id TEXT PRIMARY KEY, repo TEXT NOT NULL,
                                           pr INTEGER, author TEXT NOT NULL, created REAL NOT NULL);
    CREATE TABLE IF NOT EXISTS notes (key TEXT PRIMARY KEY, at REAL NOT NULL);
    CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
    """
    # Inbox columns added later: (column, declaration). `due` is on the dispatcher's monotonic
    # clock, which restarts with the host: the dispatcher clears it at start (inbox_restart).
    _INBOX_ADDED = (("subject", "TEXT"), ("tries", "INTEGER NOT NULL DEFAULT 0"),
                    ("due", "REAL NOT NULL DEFAULT 0"), ("error", "TEXT NOT NULL DEFAULT ''"))

    def github_tables(self) -> None:
        self.db.executescript(self._GITHUB_DDL)
        add_missing(self.db, "inbox", self._INBOX_ADDED)

    def inbox_put(self, delivery_id: str, event: str, body: bytes,
                  subject: str | None = None) -> bool:
        """Record a verified delivery for the dispatcher; False for a redelivery (same id).
        `subject` (`repo#PR`) keeps one PR's deliveries in order behind each other."""
        with self._tx() as db:
            if db.execute("INSERT OR IGNORE INTO deliveries VALUES (?, ?)",
                          (delivery_id, time.time())).rowcount != 1:
                return False
            db.execute("INSERT INTO inbox (delivery, event, body, received, subject) "
                       "VALUES (?,?,?,?,?)", (delivery_id, event, body, time.time(), subject))
            return True

    def inbox_put_many(self, items: list[tuple[str, str, bytes, str | None]]) -> list[bool]:
        """inbox_put for several deliveries (delivery, event, body, subject) in one transaction:
        one commit, one fsync (evalbot.github.inbox_writer). A delivery id twice is new once."""
        news = []
        with self._tx() as db:
            for delivery_id, event, body, subject in items:
                now = time.time()
                new = db.execute("INSERT OR IGNORE INTO deliveries VALUES (?, ?)",
                                 (delivery_id, now)).rowcount == 1
                if new:
                    db.execute("INSERT INTO inbox (delivery, event, body, received, subject) "
                               "VALUES (?,?,?,?,?)", (delivery_id, event, body, now, subject))
                news.append(new)
        return news

    def inbox_next(self, now: float | None = None) -> tuple[str, str, bytes] | None:
        """The first delivery (in arrival order) that is due and first of its subject; it stays
        until inbox_done (at-least-once). `now` is the dispatcher's monotonic clock; None: any
        delivery first of its subject, due or not."""
        row = self.db.execute(
            "SELECT delivery, event, body FROM inbox i WHERE (? IS NULL OR i.due <= ?) AND NOT "
            "EXISTS (SELECT 1 FROM inbox e WHERE e.subject = i.subject AND e.rowid < i.rowid) "
            "ORDER BY i.rowid LIMIT 1", (now, now)).fetchone()
        return None if row is None else (row["delivery"], row["event"], bytes(row["body"]))

    def inbox_defer(self, delivery_id: str, now: float, error: str, first_s: float,
                    cap_s: float = 300.0) -> float:
        """Try a delivery again later: exponential back-off from first_s, with jitter (several
        PRs failing together do not retry in step), capped at cap_s. Returns the wait."""
        with self._tx() as db:
            row = db.execute("SELECT tries FROM inbox WHERE delivery=?", (delivery_id,)).fetchone()
            tries = 1 + (int(row["tries"]) if row is not None else 0)
            wait = min(cap_s, first_s * 2 ** (tries - 1)) * random.uniform(0.5, 1.0)
            db.execute("UPDATE inbox SET tries=?, due=?, error=? WHERE delivery=?",
                       (tries, now + wait, error[:500], delivery_id))
            return wait

    def inbox_tries(self, delivery_id: str) -> int:
        row = self.db.execute("SELECT tries FROM inbox WHERE delivery=?", (delivery_id,)).fetchone()
        return 0 if row is None else int(row["tries"])

    def inbox_restart(self) -> None:
        """A new dispatcher (perhaps after a reboot: a new monotonic clock): everything is due."""
        with self._tx() as db:
            db.execute("UPDATE inbox SET due=0")

    def inbox_next_due(self) -> float | None:
        """The earliest `due` of a waiting delivery (None: the inbox is empty)."""
        row = self.db.execute("SELECT MIN(due) FROM inbox").fetchone()
        return None if row[0] is None else float(row[0])

    def inbox_counts(self) -> dict[str, int]:
        """For /metrics: deliveries waiting, of which retried at least once, and set aside."""
        waiting, retried = self.db.execute(
            "SELECT COUNT(*), COALESCE(SUM(tries > 0), 0) FROM inbox").fetchone()
        aside = self.db.execute("SELECT COUNT(*) FROM inbox_aside").fetchone()[0]
        return {"waiting": int(waiting), "retrying": int(retried), "aside": int(aside)}

    def inbox_done(self, delivery_id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM inbox WHERE delivery=?", (delivery_id,))

    def inbox_set_aside(self, delivery_id: str, error: str) -> None:
        """Move a delivery that cannot be handled (a poison payload) out of the inbox, kept
        with the error for a person to look at, so the deliveries behind it go on."""
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO inbox_aside (delivery, event, body, received, "
                       "error, at) SELECT delivery, event, body, received, ?, ? FROM inbox "
                       "WHERE delivery=?", (error, time.time(), delivery_id))
            db.execute("DELETE FROM inbox WHERE delivery=?", (delivery_id,))

    def inbox_aside(self) -> list[tuple[str, str, str]]:
        """(delivery, event, error) of every delivery set aside, oldest first."""
        rows = self.db.execute("SELECT delivery, event, error FROM inbox_aside ORDER BY at")
        return [(r["delivery"], r["event"], r["error"]) for r in rows]

    def record_admission(self, job_id: str, repo: str, pr: int, author: str) -> None:
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO admissions VALUES (?,?,?,?,?)",
                       (job_id, repo, pr, author, time.time()))

    def admissions_since(self, repo: str, since: float, *, pr: int | None = None,
                         author: str | None = None) -> int:
        row = self.db.execute("SELECT COUNT(*) FROM admissions WHERE repo=? AND created>=? AND "
                              "(? IS NULL OR pr=?) AND (? IS NULL OR author=?)",
                              (repo, since, pr, pr, author, author)).fetchone()
        return int(row[0])

    def noted_within(self, key: str, every_s: float) -> bool:
        """Whether note_once(key) was made within every_s seconds (and nothing recorded)."""
        row = self.db.execute("SELECT at FROM notes WHERE key=?", (key,)).fetchone()
        return row is not None and time.time() - row["at"] < every_s

    def note_once(self, key: str, every_s: float) -> bool:
        """True (and remembered) unless the same note was made within every_s seconds."""
        now = time.time()
        with self._tx() as db:
            row = db.execute("SELECT at FROM notes WHERE key=?", (key,)).fetchone()
            if row is not None and now - row["at"] < every_s:
                return False
            db.execute("INSERT OR REPLACE INTO notes VALUES (?, ?)", (key, now))
            return True

    def count(self, name: str) -> None:
        """Add one to a counter /metrics exposes (queue_metrics.py), e.g. surplus commands."""
        with self._tx() as db:
            db.execute("INSERT INTO counters VALUES (?, 1) ON CONFLICT(name) DO UPDATE SET "
                       "value=value+1", (name,))
