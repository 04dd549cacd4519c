"""What /metrics reads of the store file, in one pass over a read-only connection
(evalbot/service/health.py and queue_metrics.py render it). A table that a fresh or old store
lacks reads as empty.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from evalbot.store.witness_runs import json_object


@dataclass(frozen=True)
class Gauges:
    jobs: dict[str, int] = field(default_factory=dict)  # state -> jobs
    durations: list[float] = field(default_factory=list)  # harness wall time per verdict
    verdicts: list[tuple[object, str]] = field(default_factory=list)  # (kind, headline) each
    health: list[tuple[str, int, float | None, float]] = field(default_factory=list)  # latest
    # check per box: (box, healthy, worst ratio, when)
    inbox: tuple[int, int, int] = (0, 0, 0)  # waiting, retrying after an error, set aside
    publication: tuple[int, int] = (0, 0)  # finished and not on GitHub: pending, given up
    surplus: dict[str, int] = field(default_factory=dict)  # commands dropped, by reason


def read(db: sqlite3.Connection) -> Gauges:
    verdicts = _rows(db, "verdicts", "SELECT verdict, headline, results FROM verdicts")
    totals = [json_object(r[2]).get("timing", {}).get("total_s") for r in verdicts]
    return Gauges(
        jobs={r[0]: int(r[1]) for r in _rows(db, "jobs", "SELECT state, COUNT(*) FROM jobs "
                                              "GROUP BY state")},
        durations=[float(t) for t in totals if isinstance(t, (int, float))],  # Python's JSON:
        # a value may be Infinity, which SQLite's JSON functions cannot read
        verdicts=[(json_object(r[0]).get("kind"), r[1]) for r in verdicts],
        health=[(r[0], int(r[1]), r[2], float(r[3])) for r in _rows(
            db, "box_health", "SELECT box, healthy, worst_ratio, at FROM box_health WHERE id IN "
            "(SELECT MAX(id) FROM box_health GROUP BY box) ORDER BY box")],
        inbox=_inbox(db), publication=_publication(db),
        surplus={r[0].split(":", 1)[1]: int(r[1]) for r in _rows(
            db, "counters", "SELECT name, value FROM counters WHERE name LIKE "
            "'surplus_commands:%'")})


def _has(db: sqlite3.Connection, table: str, column: str | None = None) -> bool:
    rows = db.execute(f"PRAGMA table_info({table})").fetchall()
    return bool(rows) and (column is None or any(r[1] == column for r in rows))


def _rows(db: sqlite3.Connection, table: str, sql: str) -> list[sqlite3.Row]:
    return db.execute(sql).fetchall() if _has(db, table) else []


def _inbox(db: sqlite3.Connection) -> tuple[int, int, int]:
    waiting = retrying = aside = 0
    if _has(db, "inbox", "tries"):
        waiting, retrying = db.execute("SELECT COUNT(*), COALESCE(SUM(tries > 0), 0) "
                                       "FROM inbox").fetchone()
    if _has(db, "inbox_aside"):
        aside = db.execute("SELECT COUNT(*) FROM inbox_aside").fetchone()[0]
    return int(waiting), int(retrying), int(aside)


def _publication(db: sqlite3.Connection) -> tuple[int, int]:
    if not _has(db, "jobs", "unpublished"):
        return 0, 0
    pending, given_up = db.execute(
        "SELECT COALESCE(SUM(unpublished=''), 0), COALESCE(SUM(unpublished<>''), 0) FROM "
        "jobs WHERE pr IS NOT NULL AND published IS NULL AND state IN ('done','failed')"
    ).fetchone()
    return int(pending), int(given_up)
