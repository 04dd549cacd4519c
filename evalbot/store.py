"""The job store: SQLite (WAL) holds jobs, leases, deliveries and every verdict.

States: queued -> running -> done | failed; queued/running -> superseded | cancelled.
A lease expires unless renewed, so a dead worker's job returns to the queue.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
STATES = ("queued", "running", "done", "failed", "superseded", "cancelled")
ACTIVE = ("queued", "running")

_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY,
  repo TEXT NOT NULL, pr INTEGER, head_sha TEXT NOT NULL, base_sha TEXT NOT NULL DEFAULT '',
  policy TEXT NOT NULL, attempt INTEGER NOT NULL DEFAULT 1,
  state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
  lease_owner TEXT, lease_expires REAL,
  tries INTEGER NOT NULL DEFAULT 0,
  created REAL NOT NULL, updated REAL NOT NULL,
  UNIQUE (repo, pr, head_sha, policy, attempt)
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, created);
CREATE TABLE IF NOT EXISTS verdicts (
  job_id TEXT PRIMARY KEY REFERENCES jobs(id),
  repo TEXT NOT NULL, pr INTEGER, head_sha TEXT NOT NULL, base_sha TEXT NOT NULL,
  headline TEXT NOT NULL, verdict TEXT NOT NULL, results TEXT NOT NULL, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS deliveries (id TEXT PRIMARY KEY, received REAL NOT NULL);
"""


@dataclass(frozen=True)
class JobRow:
    id: str
    repo: str
    pr: int | None
    head_sha: str
    base_sha: str
    policy: str
    attempt: int
    state: str
    reason: str
    tries: int
    lease_owner: str | None
    lease_expires: float | None


class Store:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.executescript(_DDL)
        self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),))

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def enqueue(self, repo: str, pr: int | None, head_sha: str, policy: str,
                base_sha: str = "", attempt: int = 1) -> JobRow:
        """Idempotent on (repo, pr, head, policy, attempt); a new head supersedes the PR's others."""
        now = time.time()
        with self._tx() as db:
            row = db.execute("SELECT * FROM jobs WHERE repo=? AND pr IS ? AND head_sha=? AND "
                             "policy=? AND attempt=?", (repo, pr, head_sha, policy, attempt)).fetchone()
            if row is not None:
                return _job(row)
            if pr is not None:
                db.execute("UPDATE jobs SET state='superseded', reason=?, updated=? WHERE repo=? "
                           "AND pr=? AND head_sha<>? AND state IN ('queued','running')",
                           (f"superseded by {head_sha[:10]}", now, repo, pr, head_sha))
            job_id = uuid.uuid4().hex[:12]
            db.execute("INSERT INTO jobs (id, repo, pr, head_sha, base_sha, policy, attempt, "
                       "state, created, updated) VALUES (?,?,?,?,?,?,?, 'queued', ?, ?)",
                       (job_id, repo, pr, head_sha, base_sha, policy, attempt, now, now))
            return _job(db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone())

    def lease(self, worker: str, ttl_s: float) -> JobRow | None:
        """Take the oldest queued job, or a running one whose lease expired."""
        now = time.time()
        with self._tx() as db:
            row = db.execute("SELECT * FROM jobs WHERE state='queued' OR (state='running' AND "
                             "lease_expires < ?) ORDER BY created LIMIT 1", (now,)).fetchone()
            if row is None:
                return None
            db.execute("UPDATE jobs SET state='running', lease_owner=?, lease_expires=?, "
                       "tries=tries+1, updated=? WHERE id=?", (worker, now + ttl_s, now, row["id"]))
            return _job(db.execute("SELECT * FROM jobs WHERE id=?", (row["id"],)).fetchone())

    def renew(self, job_id: str, worker: str, ttl_s: float) -> bool:
        """Extend a lease; False means the job is no longer ours (superseded, cancelled, stolen)."""
        with self._tx() as db:
            cur = db.execute("UPDATE jobs SET lease_expires=?, updated=? WHERE id=? AND "
                             "lease_owner=? AND state='running'",
                             (time.time() + ttl_s, time.time(), job_id, worker))
            return cur.rowcount == 1

    def set_base(self, job_id: str, base_sha: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE jobs SET base_sha=?, updated=? WHERE id=?",
                       (base_sha, time.time(), job_id))

    def finish(self, job_id: str, worker: str, verdict: dict[str, Any],
               results: dict[str, Any]) -> bool:
        """Record the verdict; False if the lease was lost (the result is then not ours)."""
        now = time.time()
        with self._tx() as db:
            row = db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
            if row is None or row["lease_owner"] != worker or row["state"] != "running":
                return False
            db.execute("UPDATE jobs SET state='done', lease_owner=NULL, updated=? WHERE id=?",
                       (now, job_id))
            db.execute("INSERT OR REPLACE INTO verdicts VALUES (?,?,?,?,?,?,?,?,?)",
                       (job_id, row["repo"], row["pr"], row["head_sha"],
                        verdict["provenance"]["base_sha"], verdict["headline"],
                        json.dumps(verdict, sort_keys=True), json.dumps(results, sort_keys=True), now))
            return True

    def fail(self, job_id: str, worker: str, reason: str, retry: bool) -> None:
        state = "queued" if retry else "failed"
        with self._tx() as db:
            db.execute("UPDATE jobs SET state=?, reason=?, lease_owner=NULL, updated=? "
                       "WHERE id=? AND lease_owner=?", (state, reason, time.time(), job_id, worker))

    def cancel(self, repo: str, pr: int) -> int:
        with self._tx() as db:
            return db.execute("UPDATE jobs SET state='cancelled', reason='cancelled', updated=? "
                              "WHERE repo=? AND pr=? AND state IN ('queued','running')",
                              (time.time(), repo, pr)).rowcount

    def get(self, job_id: str) -> JobRow:
        row = self.db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise KeyError(job_id)
        return _job(row)

    def jobs(self, state: str | None = None) -> list[JobRow]:
        sql = "SELECT * FROM jobs" + (" WHERE state=?" if state else "") + " ORDER BY created"
        return [_job(r) for r in self.db.execute(sql, (state,) if state else ())]

    def history(self, repo: str | None = None, pr: int | None = None,
                sha: str | None = None) -> list[dict[str, Any]]:
        """Verdicts, newest first, filtered by repo, PR and head SHA (prefix)."""
        sql = "SELECT * FROM verdicts WHERE (? IS NULL OR repo=?) AND (? IS NULL OR pr=?) " \
              "AND (? IS NULL OR head_sha LIKE ?) ORDER BY created DESC"
        rows = self.db.execute(sql, (repo, repo, pr, pr, sha, f"{sha}%"))
        return [{"job_id": r["job_id"], "repo": r["repo"], "pr": r["pr"], "head_sha": r["head_sha"],
                 "base_sha": r["base_sha"], "headline": r["headline"], "created": r["created"],
                 "verdict": json.loads(r["verdict"]), "results": json.loads(r["results"])}
                for r in rows]

    def first_delivery(self, delivery_id: str) -> bool:
        """True the first time a webhook delivery id is seen; redeliveries are dropped."""
        with self._tx() as db:
            cur = db.execute("INSERT OR IGNORE INTO deliveries VALUES (?, ?)",
                             (delivery_id, time.time()))
            return cur.rowcount == 1

    def close(self) -> None:
        self.db.close()

    # ---- GitHub intake (evalbot/github): inbox, admissions, rate-limited notes -----------------
    _GITHUB_DDL = """
    CREATE TABLE IF NOT EXISTS inbox (delivery TEXT PRIMARY KEY, event TEXT NOT NULL,
                                      body BLOB NOT NULL, received REAL NOT NULL);
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

    def pr_jobs(self, repo: str, pr: int) -> list[JobRow]:
        rows = self.db.execute("SELECT * FROM jobs WHERE repo=? AND pr=? ORDER BY created, rowid",
                               (repo, pr))
        return [_job(r) for r in rows]

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

    def note_once(self, key: str, every_s: float) -> bool:
        """True (and remembered) unless the same note was made within every_s seconds."""
        now = time.time()
        with self._tx() as db:
            row = db.execute("SELECT at FROM notes WHERE key=?", (key,)).fetchone()
            if row is not None and now - row["at"] < every_s:
                return False
            db.execute("INSERT OR REPLACE INTO notes VALUES (?, ?)", (key, now))
            return True


def _job(row: sqlite3.Row) -> JobRow:
    return JobRow(row["id"], row["repo"], row["pr"], row["head_sha"], row["base_sha"],
                  row["policy"], row["attempt"], row["state"], row["reason"], row["tries"],
                  row["lease_owner"], row["lease_expires"])
