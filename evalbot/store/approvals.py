"""Who approved which head of a PR: the approval label counts only as recorded here.

A `labeled` delivery with the approval label, sent by someone with write access, records an
approval for the head the PR had then. Admission asks for an approval of the head under test
(or of any head, with `approve_later_pushes: true`), so a fork's later push needs a new one.
The table lives in the store file, next to the jobs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from evalbot.store.jobs import Store


@dataclass(frozen=True)
class Approval:
    head_sha: str
    by: str


class Approvals:
    def __init__(self, store: Store) -> None:
        self.db = store.db  # the store's own connection: its table is in store/schema.py

    def record(self, repo: str, pr: int, head_sha: str, by: str) -> None:
        with self.db:
            self.db.execute("INSERT INTO approvals VALUES (?,?,?,?,?)",
                            (repo, pr, head_sha, by, time.time()))

    def of(self, repo: str, pr: int) -> list[Approval]:
        """Every approval of the PR, oldest first."""
        rows = self.db.execute("SELECT head_sha, by FROM approvals WHERE repo=? AND pr=? "
                               "ORDER BY at, rowid", (repo, pr))
        return [Approval(r[0], r[1]) for r in rows]

    def covers(self, repo: str, pr: int, head_sha: str, any_head: bool) -> bool:
        return any(any_head or a.head_sha == head_sha for a in self.of(repo, pr))
