"""The GitHub intake's tables in the store file: the webhook inbox, admissions, rate-limited notes.

A part of the job store (evalbot.store.jobs.Store inherits it): the same connection and
transactions; kept apart so each module holds one concern.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager


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
    """

    def github_tables(self) -> None:
        self.db.executescript(self._GITHUB_DDL)

    def inbox_put(self, delivery_id: str, event: str, body: bytes) -> bool:
        """Record a verified delivery for the dispatcher; False for a redelivery (same id)."""
        with self._tx() as db:
            if db.execute("INSERT OR IGNORE INTO deliveries VALUES (?, ?)",
                          (delivery_id, time.time())).rowcount != 1:
                return False
            db.execute("INSERT INTO inbox VALUES (?,?,?,?)",
                       (delivery_id, event, body, time.time()))
            return True

    def inbox_next(self) -> tuple[str, str, bytes] | None:
        """The oldest unprocessed delivery; it stays until inbox_done (at-least-once)."""
        row = self.db.execute("SELECT delivery, event, body FROM inbox ORDER BY received, "
                              "rowid LIMIT 1").fetchone()
        return None if row is None else (row["delivery"], row["event"], bytes(row["body"]))

    def inbox_done(self, delivery_id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM inbox WHERE delivery=?", (delivery_id,))

    def inbox_set_aside(self, delivery_id: str, error: str) -> None:
        """Move a delivery that cannot be handled (a poison payload) out of the inbox, kept
        with the error for a person to look at, so the deliveries behind it go on."""
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO inbox_aside SELECT delivery, event, body, received,"
                       " ?, ? FROM inbox WHERE delivery=?", (error, time.time(), delivery_id))
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
