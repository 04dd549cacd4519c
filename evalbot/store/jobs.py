"""The job store: SQLite (WAL) holds jobs, leases, deliveries and every verdict.

States: queued -> running -> done | failed; queued/running -> superseded | cancelled.
A lease expires unless renewed, so a dead worker's job returns to the queue. Every lease is
also recorded as an interval (`leases`), which is how concurrency and box time are accounted.
docs/contracts.md section 5 is the API.

The same store, one connection and its transactions, also keeps the GitHub intake (the webhook
inbox, admissions, rate-limited notes), what is left to publish, and who is writing a PR now
(its claim). The inbox is ordered by the store's own sequence (rowid), never by a clock: a clock
stepped back cannot put an older push behind a newer one. Each delivery names its subject
(`repo#PR`); only the oldest delivery of a subject may be handled, so one PR's events stay in
order, while a delivery that failed (GitHub answering 5xx for that PR) waits out its back-off
without holding any other PR's deliveries behind it. Publication back-offs are on
`time.monotonic()`, which every process of one host shares and no clock step moves; a store
opened under another boot clears them. A claim is judged by its holder's process
(evalbot/store/claims.py).
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalbot.engine.contract.verdict import validate as validate_verdict
from evalbot.store import schema
from evalbot.store.claims import holder_gone, holding, my_start
from evalbot.store.leasing import HOST, beat_columns, end_lease, fairest, first_expired

SCHEMA_VERSION = 1
STATES = ("queued", "running", "done", "failed", "superseded", "cancelled")
ACTIVE = ("queued", "running")



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


class Store:
    """Jobs, leases, verdicts; the GitHub intake, publication's back-offs and the PRs' claims."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.host = HOST  # whose monotonic clock this process shares (leasing.py)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = schema.connect(self.path)
        self.db.execute("PRAGMA foreign_keys=ON")
        self._clear_old_boot_deadlines()
        self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),))

    def _clear_old_boot_deadlines(self) -> None:
        """Publication back-offs of another boot: its monotonic clock's deadlines mean nothing."""
        row = self.db.execute("SELECT value FROM meta WHERE key='boot_id'").fetchone()
        if row is None or row[0] != self.host:
            with self._tx() as db:
                db.execute("UPDATE jobs SET publish_due=0")
                db.execute("INSERT OR REPLACE INTO meta VALUES ('boot_id', ?)", (self.host,))

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
        if verdict is not None:
            validate_verdict(verdict)  # a verdict of this version, or nothing is stored
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
        validate_verdict(verdict)
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
        finish and publish, a GitHub outage, a re-grade), not given up (`give_up_publishing`)."""
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

    def hand_back(self, job_id: str, worker: str) -> bool:
        """A drain: expire the worker's lease now, close its interval as `handed-back` and take
        back the try the lease counted; False when the job is no longer the worker's."""
        now = time.time()
        with self._tx() as db:
            got = db.execute("UPDATE jobs SET lease_expires=?, lease_ttl=0, tries=MAX(tries-1, 0), "
                             "updated=? WHERE id=? AND lease_owner=? AND state='running'",
                             (now, now, job_id, worker)).rowcount == 1
            if got:
                db.execute("UPDATE leases SET ended=?, outcome='handed-back' WHERE job_id=? AND "
                           "worker=? AND ended IS NULL", (now, job_id, worker))
            return got

    def never_checkpoint(self) -> None:
        """This connection's commits never checkpoint the WAL (the webhook's writer: another
        connection's commits do)."""
        self.db.execute("PRAGMA wal_autocheckpoint=0")

    def end_failed_commit(self) -> None:
        """A COMMIT that failed (a full disk) leaves its transaction open: end it."""
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")

    def record_merge(self, repo: str, pr: int, head_sha: str, main_sha: str,
                     merged: float | None = None) -> None:
        """Note that merging `pr` (evaluated at head_sha) made main `main_sha` (idempotent)."""
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO merges VALUES (?,?,?,?,?)",
                       (repo, pr, head_sha, main_sha, time.time() if merged is None else merged))

    def merges(self) -> dict[tuple[str, str], int]:
        """(repo, main SHA) -> the PR whose merge produced it."""
        return {(r[0], r[1]): int(r[2])
                for r in self.db.execute("SELECT repo, main_sha, pr FROM merges")}

    def close(self) -> None:
        self.db.close()

    def pr_jobs(self, repo: str, pr: int) -> list[JobRow]:
        rows = self.db.execute("SELECT * FROM jobs WHERE repo=? AND pr=? ORDER BY created, rowid",
                               (repo, pr))
        return [_job(r) for r in rows]

    # ---- the GitHub intake: the webhook inbox (at-least-once, for the dispatcher), admissions,
    # notes and counters (evalbot/github) ----------------------------------------------------
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

    # ---- what is left to publish, and why one never will be: a failure that may pass puts the
    # job back with a back-off; one that will not (a locked conversation, a PR gone) is given up
    # with its reason, which `evalbot status --json` shows ----------------------------------------
    def due_unpublished(self, now: float | None = None) -> list[str]:
        """unpublished() whose back-off has passed."""
        now = time.monotonic() if now is None else now
        rows = self.db.execute(_UNPUBLISHED + " AND unpublished='' AND publish_due<=? ORDER BY updated",
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
        rows = self.db.execute(_UNPUBLISHED + " AND unpublished<>'' ORDER BY updated")
        return [(r["id"], int(r["pr"]), r["unpublished"]) for r in rows]

    # ---- who is writing one PR on GitHub now: one claim per subject (`repo#PR`), judged by its
    # holder's process (evalbot/store/claims.py) -----------------------------------------------
    @contextmanager
    def _unsynced(self) -> Iterator[sqlite3.Connection]:
        """A claim's transaction, not synced to disk: a claim need not outlive a power loss (its
        holder dies with the machine), and the dispatcher takes one per delivery (about 0.4 ms
        a commit here instead of 7 with the store's fsync)."""
        level = self.db.execute("PRAGMA synchronous").fetchone()[0]
        self.db.execute("PRAGMA synchronous=OFF")
        try:
            with self._tx() as db:
                yield db
        finally:
            self.db.execute(f"PRAGMA synchronous={int(level)}")

    def claim(self, subject: str, owner: str) -> bool:
        """Take the subject for `owner` (again, if it holds it); False while someone else does."""
        with self._unsynced() as db:
            row = db.execute("SELECT * FROM claims WHERE subject=?", (subject,)).fetchone()
            if row is not None and row["owner"] != owner and \
                    not holder_gone(str(self.path.resolve()), row, self.host):
                return False
            db.execute("INSERT OR REPLACE INTO claims VALUES (?,?,?,?,?,?)",
                       (subject, owner, self.host, os.getpid(), my_start(), time.time()))
        holding(str(self.path.resolve()), subject, owner, True)
        return True

    def unclaim(self, subject: str, owner: str) -> None:
        # first: should the store refuse the delete, the claim is still let go
        holding(str(self.path.resolve()), subject, owner, False)
        with self._unsynced() as db:
            db.execute("DELETE FROM claims WHERE subject=? AND owner=?", (subject, owner))

    def claimant(self, subject: str) -> str | None:
        """Who claims the subject now, as recorded (alive or not)."""
        row = self.db.execute("SELECT owner FROM claims WHERE subject=?", (subject,)).fetchone()
        return None if row is None else str(row["owner"])


_UNPUBLISHED = ("SELECT * FROM jobs WHERE pr IS NOT NULL AND published IS NULL AND state IN "
                "('done','failed')")


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
