"""Maintainer overrides with an audit trail: the `overrides` table of the store file (a connection
of its own). Every override is one row: who, when, what, why, for which PR and head. Rows are never
updated or deleted, so the table is the history. What the overrides do to a verdict, a comment
and a job is evalbot/grading/overrides.py's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalbot.store import schema

ACTIONS = ("hold", "unhold", "waive", "measure-more")
REASON_CAP = 300  # characters of a waiver's reason kept and shown


@dataclass(frozen=True)
class Entry:
    """One audit-trail row."""

    id: int
    repo: str
    pr: int
    head_sha: str
    action: str
    who: str
    reason: str
    job_id: str
    earlier_job: str
    factor: float
    at: float


class Overrides:
    """The overrides table in the store file."""

    def __init__(self, path: Path) -> None:
        self.db = schema.connect(path)

    def record(self, repo: str, pr: int, head_sha: str, action: str, who: str, *,
               reason: str = "", job_id: str = "", earlier_job: str = "",
               factor: float = 1.0) -> Entry:
        if action not in ACTIONS:
            raise ValueError(f"override action {action!r}: expected one of {', '.join(ACTIONS)}")
        if action == "waive" and not reason.strip():
            raise ValueError("a waiver needs a reason")
        if action == "measure-more" and not (factor > 1.0 and job_id and earlier_job):
            raise ValueError("measure-more needs a factor above 1, the new job and the earlier one")
        with self.db:
            cur = self.db.execute(
                "INSERT INTO overrides (repo, pr, head_sha, action, who, reason, job_id, "
                "earlier_job, factor, at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (repo, pr, head_sha, action, who, reason.strip()[:REASON_CAP], job_id,
                 earlier_job, factor, time.time()))
        return self._one("SELECT * FROM overrides WHERE id=?", (cur.lastrowid,))

    def trail(self, repo: str, pr: int) -> list[Entry]:
        """Every override of the PR, oldest first."""
        rows = self.db.execute("SELECT * FROM overrides WHERE repo=? AND pr=? ORDER BY id",
                               (repo, pr))
        return [Entry(**dict(r)) for r in rows]

    def is_held(self, repo: str, pr: int) -> bool:
        """The latest hold or unhold decides."""
        row = self.db.execute("SELECT action FROM overrides WHERE repo=? AND pr=? AND action IN "
                              "('hold','unhold') ORDER BY id DESC LIMIT 1", (repo, pr)).fetchone()
        return row is not None and row["action"] == "hold"

    def waiver(self, repo: str, pr: int, head_sha: str) -> Entry | None:
        """The latest waiver of this exact head; a new push needs a new waiver."""
        row = self.db.execute("SELECT * FROM overrides WHERE repo=? AND pr=? AND head_sha=? AND "
                              "action='waive' ORDER BY id DESC LIMIT 1",
                              (repo, pr, head_sha)).fetchone()
        return None if row is None else Entry(**dict(row))

    def plan(self, job_id: str) -> Entry | None:
        """The measure-more entry that created this job: the worker scales it and pools."""
        row = self.db.execute("SELECT * FROM overrides WHERE job_id=? AND action='measure-more' "
                              "ORDER BY id DESC LIMIT 1", (job_id,)).fetchone()
        return None if row is None else Entry(**dict(row))

    def close(self) -> None:
        self.db.close()

    def _one(self, sql: str, args: tuple[Any, ...]) -> Entry:
        return Entry(**dict(self.db.execute(sql, args).fetchone()))
