"""The witness records of a box's recent jobs and its stored witness floors, read from the store
file for the stale-floor test (evalbot.grading.witness_floor): no box time, no new table.

Read-only: the /metrics endpoint reads through a read-only connection.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from evalbot.store.noise import WITNESS_FLOOR

RECENT_VERDICTS = 200  # a box's newest verdicts read for its witnesses' records


def _has(db: sqlite3.Connection, table: str) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                      (table,)).fetchone() is not None


def boxes(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """(box, profile) of every box with a finished job, the profile of its newest one."""
    if not (_has(db, "jobs") and _has(db, "verdicts")):
        return []
    out = []
    for (box,) in db.execute("SELECT DISTINCT box FROM jobs WHERE box IS NOT NULL AND box != '' "
                             "ORDER BY box"):
        newest = db.execute("SELECT v.results FROM verdicts v JOIN jobs j ON j.id = v.job_id "
                            "WHERE j.box = ? ORDER BY v.created DESC LIMIT 1", (box,)).fetchone()
        if newest is not None:
            out.append((str(box), str(json_object(newest[0]).get("profile") or "")))
    return out


def witness_records(db: sqlite3.Connection, box: str, profile: str,
                    limit: int = RECENT_VERDICTS) -> list[dict[str, Any]]:
    """Each harness-owned witness record of the box's newest `limit` verdicts of `profile`, with
    `created` (the verdict's time) added."""
    if not (_has(db, "jobs") and _has(db, "verdicts")):
        return []
    rows = db.execute("SELECT v.results, v.created FROM verdicts v JOIN jobs j ON "
                      "j.id = v.job_id WHERE j.box = ? ORDER BY v.created DESC LIMIT ?",
                      (box, limit))
    out = []
    for results, created in rows:
        doc = json_object(results)
        if doc.get("profile") != profile:
            continue
        out += [{**w, "created": float(created)} for w in doc.get("witnesses") or []
                if isinstance(w, dict) and w.get("source", "witness") == "witness"]
    return out


def stored_floors(db: sqlite3.Connection, box: str,
                  profile: str) -> dict[str, tuple[float, float]]:
    """Witness name -> (the box's floor for it in the box_noise table, when it was measured)."""
    if not _has(db, "box_noise"):
        return {}
    prefix = WITNESS_FLOOR
    rows = db.execute("SELECT cell, sd, created FROM box_noise WHERE box = ? AND profile = ? "
                      "AND substr(cell, 1, ?) = ?", (box, profile, len(prefix), prefix))
    return {cell[len(prefix):]: (float(sd), float(created)) for cell, sd, created in rows}


def json_object(text: str) -> dict[str, Any]:
    """A stored JSON column as an object; {} for anything else (a damaged row reads as empty)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}
