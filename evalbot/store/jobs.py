"""The job store: SQLite (WAL) holds jobs, leases, deliveries and every verdict.

States: queued -> running -> done | failed; queued/running -> superseded | cancelled.
A lease expires unless renewed, so a dead worker's job returns to the queue. Every lease is
also recorded as an interval (`leases`), which is how concurrency and box time are accounted.
docs/contracts.md section 5 is the API.
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

from evalbot.store.claims import ClaimTables
from evalbot.store.columns import add_missing
from evalbot.store.intake import IntakeTables
from evalbot.store.leasing import HOST, beat_columns, end_lease, fairest, first_expired
from evalbot.store.publication import PublicationTables

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
CREATE TABLE IF NOT EXISTS leases (
  id INTEGER PRIMARY KEY, job_id TEXT NOT NULL REFERENCES jobs(id), worker TEXT NOT NULL,
  box TEXT NOT NULL DEFAULT '', started REAL NOT NULL, ended REAL, outcome TEXT
);
CREATE INDEX IF NOT EXISTS leases_job ON leases (job_id);
CREATE TABLE IF NOT EXISTS verdict_revisions (
  job_id TEXT NOT NULL, policy TEXT NOT NULL, verdict TEXT NOT NULL, replaced REAL NOT NULL
);
"""
# Columns added after schema 1 shipped: (table, column, declaration). Added on open when absent.
_ADDED = (
    ("jobs", "box", "TEXT"),  # the box of the current or last lease
    ("jobs", "not_before", "REAL NOT NULL DEFAULT 0"),  # retry back-off: not leased before
    ("jobs", "started", "REAL"),  # first start: base is resolved once, then kept
    ("jobs", "published", "REAL"),  # when the final state reached GitHub (NULL: not yet)
    ("verdicts", "stale", "INTEGER NOT NULL DEFAULT 0"),  # main moved since base_sha
    ("verdicts", "box_s", "REAL NOT NULL DEFAULT 0"),  # leased box time of the evaluation
    ("verdicts", "saved_s", "REAL NOT NULL DEFAULT 0"),  # build time saved by cached builds
    ("jobs", "lease_ttl", "REAL"),  # leasing.py: expiry by heartbeat and monotonic clocks
    ("jobs", "lease_beat", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "lease_host", "TEXT"),
    ("jobs", "lease_mono", "REAL"),
)


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
    box: str | None = None
    not_before: float = 0.0
    started: float | None = None
    published: float | None = None
    lease_ttl: float | None = None  # 0: handed back by a drain, expired at once (leasing.py)


class Store(IntakeTables, PublicationTables, ClaimTables):
    """Jobs, leases, verdicts; the GitHub intake's tables come from IntakeTables, what is left to
    publish from PublicationTables, who is writing a PR on GitHub from ClaimTables."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.host = HOST  # whose monotonic clock this process shares (leasing.py)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.executescript(_DDL)
        self.github_tables()  # fairness reads authors from admissions, GitHub or not
        self._migrate()
        self.publication_columns()
        self.claim_tables()
        self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),))

    def _migrate(self) -> None:
        for table in dict.fromkeys(t for t, _, _ in _ADDED):
            add_missing(self.db, table, [(c, d) for t, c, d in _ADDED if t == table])

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

    def lease(self, worker: str, ttl_s: float, box: str = "") -> JobRow | None:
        """Take a job: an expired lease first (its worker died), else the fairest queued one.

        Fair: the author served longest ago goes first, then the PR served longest ago, then the
        oldest job (round-robin across authors and PRs; authors come from admissions). The
        lease is recorded as an interval in `leases`."""
        now = time.time()
        with self._tx() as db:
            row = first_expired(str(self.path), db, self.host)  # not by the wall clock
            if row is not None:
                db.execute("UPDATE leases SET ended=?, outcome='expired' WHERE job_id=? AND "
                           "ended IS NULL", (min(now, row["lease_expires"] or now), row["id"]))
            else:
                row = fairest(db, now)
            if row is None:
                return None
            beat, values = beat_columns(ttl_s)
            db.execute(f"UPDATE jobs SET state='running', lease_owner=?, lease_expires=?, box=?, "
                       f"tries=tries+1, updated=?, {beat} WHERE id=?",
                       (worker, now + ttl_s, box, now, *values, row["id"]))
            db.execute("INSERT INTO leases (job_id, worker, box, started) VALUES (?,?,?,?)",
                       (row["id"], worker, box, now))
            return _job(db.execute("SELECT * FROM jobs WHERE id=?", (row["id"],)).fetchone())

    def renew(self, job_id: str, worker: str, ttl_s: float) -> bool:
        """Extend a lease; False means the job is no longer ours (superseded, cancelled, stolen,
        or handed back by a drain: the check and the update are one statement, so a renewal
        racing a hand-back can never revive the lease it handed back)."""
        beat, values = beat_columns(ttl_s)
        with self._tx() as db:
            cur = db.execute(f"UPDATE jobs SET lease_expires=?, updated=?, {beat} WHERE id=? "
                             "AND lease_owner=? AND state='running' AND EXISTS "
                             "(SELECT 1 FROM leases WHERE leases.job_id=jobs.id AND "
                             "leases.worker=? AND leases.ended IS NULL)",
                             (time.time() + ttl_s, time.time(), *values, job_id, worker, worker))
            return cur.rowcount == 1

    def set_base(self, job_id: str, base_sha: str) -> None:
        """The base the job measures against, fixed at its first start (DESIGN section 4)."""
        with self._tx() as db:
            db.execute("UPDATE jobs SET base_sha=?, started=COALESCE(started, ?), updated=? "
                       "WHERE id=?", (base_sha, time.time(), time.time(), job_id))

    def finish(self, job_id: str, worker: str, verdict: dict[str, Any],
               results: dict[str, Any]) -> bool:
        """Record the verdict; False if the lease was lost (the result is then not ours)."""
        return self._close(job_id, worker, "done", "", verdict, results)

    def fail(self, job_id: str, worker: str, reason: str, retry: bool, *,
             backoff_s: float = 0.0, verdict: dict[str, Any] | None = None,
             results: dict[str, Any] | None = None) -> str:
        """Back to the queue (retry, not before backoff_s from now) or failed for good, with the
        failure verdict (and results, if any) to publish. Returns the job's state afterwards."""
        if retry:
            now = time.time()  # one clock reading: the back-off counts from the lease's end
            with self._tx() as db:
                db.execute("UPDATE jobs SET state='queued', reason=?, lease_owner=NULL, "
                           "not_before=?, updated=? WHERE id=? AND lease_owner=? AND "
                           "state='running'", (reason, now + backoff_s, now, job_id, worker))
                end_lease(db, job_id, worker, "retry", now)
        else:
            self._close(job_id, worker, "failed", reason, verdict,
                        (results or {}) if verdict else None)
        return self.get(job_id).state

    def _close(self, job_id: str, worker: str, state: str, reason: str,
               verdict: dict[str, Any] | None, results: dict[str, Any] | None) -> bool:
        now = time.time()
        with self._tx() as db:
            row = db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
            if row is None or row["lease_owner"] != worker or row["state"] != "running":
                return False
            db.execute("UPDATE jobs SET state=?, reason=?, lease_owner=NULL, updated=? "
                       "WHERE id=?", (state, reason, now, job_id))
            box_s = end_lease(db, job_id, worker, state)
            if verdict is not None and results is not None:
                db.execute("INSERT OR REPLACE INTO verdicts (job_id, repo, pr, head_sha, "
                           "base_sha, headline, verdict, results, created, box_s, saved_s) "
                           "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                           (job_id, row["repo"], row["pr"], row["head_sha"],
                            verdict["provenance"]["base_sha"], verdict["headline"],
                            json.dumps(verdict, sort_keys=True),
                            json.dumps(results, sort_keys=True), now, box_s, saved_s(results)))
            return True

    def release(self, job_id: str, worker: str) -> None:
        """The worker let go of a job it no longer owns (superseded, cancelled, stolen)."""
        state = self.get(job_id).state
        with self._tx() as db:
            end_lease(db, job_id, worker, state if state != "running" else "lost")

    def cancel(self, repo: str, pr: int, reason: str = "cancelled") -> int:
        """reason 'closed' (the PR was closed) lets a reopen queue the head again."""
        with self._tx() as db:
            return db.execute("UPDATE jobs SET state='cancelled', reason=?, updated=? "
                              "WHERE repo=? AND pr=? AND state IN ('queued','running')",
                              (reason, time.time(), repo, pr)).rowcount

    def get(self, job_id: str) -> JobRow:
        row = self.db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise KeyError(job_id)
        return _job(row)

    def jobs(self, state: str | None = None) -> list[JobRow]:
        sql = "SELECT * FROM jobs" + (" WHERE state=?" if state else "") + " ORDER BY created"
        return [_job(r) for r in self.db.execute(sql, (state,) if state else ())]

    def history(self, repo: str | None = None, pr: int | None = None,
                sha: str | None = None, since: float | None = None,
                until: float | None = None) -> list[dict[str, Any]]:
        """Verdicts, newest first, filtered by repo, PR, head SHA (prefix) and date (epoch s)."""
        sql = "SELECT * FROM verdicts WHERE (? IS NULL OR repo=?) AND (? IS NULL OR pr=?) " \
              "AND (? IS NULL OR head_sha LIKE ?) AND (? IS NULL OR created>=?) " \
              "AND (? IS NULL OR created<?) ORDER BY created DESC"
        rows = self.db.execute(sql, (repo, repo, pr, pr, sha, f"{sha}%", since, since,
                                     until, until))
        return [{"job_id": r["job_id"], "repo": r["repo"], "pr": r["pr"], "head_sha": r["head_sha"],
                 "base_sha": r["base_sha"], "headline": r["headline"], "created": r["created"],
                 "stale": bool(r["stale"]), "box_s": r["box_s"], "saved_s": r["saved_s"],
                 "verdict": json.loads(r["verdict"]), "results": json.loads(r["results"])}
                for r in rows]

    # ---- the service's queue: leases, staleness, re-grading, publication ---------------------
    def leases(self, job_id: str | None = None) -> list[dict[str, Any]]:
        """Recorded lease intervals, oldest first (ended None: still held)."""
        rows = self.db.execute("SELECT * FROM leases WHERE (? IS NULL OR job_id=?) ORDER BY id",
                               (job_id, job_id))
        return [dict(r) for r in rows]

    def mark_stale(self, repo: str, main_sha: str) -> list[str]:
        """Main is now main_sha: every verdict measured against another base goes stale."""
        with self._tx() as db:
            ids = [r[0] for r in db.execute("SELECT job_id FROM verdicts WHERE repo=? AND "
                                            "base_sha<>? AND stale=0", (repo, main_sha))]
            db.execute("UPDATE verdicts SET stale=1 WHERE repo=? AND base_sha<>? AND stale=0",
                       (repo, main_sha))
            return ids

    def regrade(self, job_id: str, verdict: dict[str, Any]) -> bool:
        """Replace a stored verdict (the old one is kept as a revision); republish if changed."""
        with self._tx() as db:
            row = db.execute("SELECT verdict FROM verdicts WHERE job_id=?", (job_id,)).fetchone()
            new = json.dumps(verdict, sort_keys=True)
            if row is None or row["verdict"] == new:
                return False
            old = json.loads(row["verdict"])
            db.execute("INSERT INTO verdict_revisions VALUES (?,?,?,?)",
                       (job_id, old["provenance"]["policy"], row["verdict"], time.time()))
            db.execute("UPDATE verdicts SET verdict=?, headline=? WHERE job_id=?",
                       (new, verdict["headline"], job_id))
            db.execute("UPDATE jobs SET published=NULL, unpublished='' WHERE id=?", (job_id,))
            return True

    def revisions(self, job_id: str) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM verdict_revisions WHERE job_id=? ORDER BY rowid",
                               (job_id,))
        return [{**dict(r), "verdict": json.loads(r["verdict"])} for r in rows]

    def is_merge_candidate(self, job_id: str) -> bool:
        """An improved verdict that is still its PR's latest job: worth re-measuring on a new
        main before someone merges it."""
        row = self.db.execute("SELECT v.verdict, j.repo, j.pr, j.created FROM verdicts v JOIN "
                              "jobs j ON j.id=v.job_id WHERE v.job_id=?", (job_id,)).fetchone()
        if row is None or row["pr"] is None or json.loads(row["verdict"])["kind"] != "improved":
            return False
        newer = self.db.execute("SELECT COUNT(*) FROM jobs WHERE repo=? AND pr=? AND created>? "
                                "AND state NOT IN ('superseded','cancelled')",
                                (row["repo"], row["pr"], row["created"])).fetchone()[0]
        return int(newer) == 0

    def requeue(self, job_id: str) -> JobRow:
        """The same head again as the next attempt (its base resolves when it starts)."""
        old = self.get(job_id)
        attempt = 1 + int(self.db.execute(
            "SELECT MAX(attempt) FROM jobs WHERE repo=? AND pr IS ? AND head_sha=? AND policy=?",
            (old.repo, old.pr, old.head_sha, old.policy)).fetchone()[0])
        # no admission row: a re-measure is the bot's choice and spends no author's quota
        return self.enqueue(old.repo, old.pr, old.head_sha, old.policy, attempt=attempt)

    def unpublished(self) -> list[JobRow]:
        """Finished PR jobs whose final state has not reached GitHub yet (a crash between
        finish and publish, a GitHub outage, a re-grade), not given up (publication.py)."""
        rows = self.db.execute("SELECT * FROM jobs WHERE pr IS NOT NULL AND published IS NULL "
                               "AND state IN ('done','failed') AND unpublished='' ORDER BY "
                               "updated")
        return [_job(r) for r in rows]

    def box_time(self) -> dict[str, float]:
        """Box seconds spent on evaluations and build seconds saved by cached builds."""
        row = self.db.execute("SELECT COALESCE(SUM(box_s),0), COALESCE(SUM(saved_s),0), "
                              "COUNT(*) FROM verdicts").fetchone()
        return {"box_s": float(row[0]), "saved_s": float(row[1]), "verdicts": int(row[2])}

    def first_delivery(self, delivery_id: str) -> bool:
        """True the first time a webhook delivery id is seen; redeliveries are dropped."""
        with self._tx() as db:
            cur = db.execute("INSERT OR IGNORE INTO deliveries VALUES (?, ?)",
                             (delivery_id, time.time()))
            return cur.rowcount == 1

    def close(self) -> None:
        self.db.close()

    def pr_jobs(self, repo: str, pr: int) -> list[JobRow]:
        rows = self.db.execute("SELECT * FROM jobs WHERE repo=? AND pr=? ORDER BY created, rowid",
                               (repo, pr))
        return [_job(r) for r in rows]


def _job(row: sqlite3.Row) -> JobRow:
    return JobRow(row["id"], row["repo"], row["pr"], row["head_sha"], row["base_sha"],
                  row["policy"], row["attempt"], row["state"], row["reason"], row["tries"],
                  row["lease_owner"], row["lease_expires"], row["box"], row["not_before"],
                  row["started"], row["published"], row["lease_ttl"])


def saved_s(results: dict[str, Any]) -> float:
    """Build seconds a cached build saved: the original build's duration, per cached side."""
    total = 0.0
    for side in ("base", "head"):
        facts = results.get(side) or {}
        if facts.get("cached"):
            total += float(facts.get("saved_s") or 0.0)
    return total
