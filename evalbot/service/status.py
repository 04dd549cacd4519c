"""`evalbot status`: what is queued and running, the boxes, the last verdicts."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from rich.table import Table

from evalbot.config.settings import BoxConfig
from evalbot.store.jobs import ACTIVE, Store


def snapshot(store: Store, boxes: Iterable[BoxConfig], last: int) -> dict[str, Any]:
    """A JSON-able picture of the service; box addresses are never included."""
    now = time.time()
    queue = [
        {"job": j.id, "repo": j.repo, "pr": j.pr, "head": j.head_sha[:10], "state": j.state,
         "attempt": j.attempt, "tries": j.tries, "worker": j.lease_owner,
         "lease_left_s": round(j.lease_expires - now) if j.lease_expires else None}
        for j in store.jobs() if j.state in ACTIVE
    ]
    verdicts = [
        {"job": h["job_id"], "repo": h["repo"], "pr": h["pr"], "head": h["head_sha"][:10],
         "headline": h["headline"], "kind": h["verdict"]["kind"], "stale": h["stale"],
         "box_s": round(h["box_s"]), "saved_s": round(h["saved_s"]),
         "age_s": round(now - h["created"])}
        for h in store.history()[:last]
    ]
    running = {j.box: j for j in store.jobs("running") if j.box}
    box_rows = [{"name": b.name, "kind": b.kind, "labels": list(b.labels),
                 "state": "busy" if b.name in running else "idle",
                 "job": running[b.name].id if b.name in running else None}
                for b in boxes]
    totals = store.box_time()
    time_row = {"verdicts": totals["verdicts"], "box_s": round(totals["box_s"]),
                "build_s_saved": round(totals["saved_s"])}
    unpublished = [{"job": job, "pr": pr, "reason": reason}  # given up: a person must look
                   for job, pr, reason in store.given_up()]
    return {"queue": queue, "boxes": box_rows, "verdicts": verdicts, "box_time": [time_row],
            "unpublished": unpublished}


def render_status(snap: dict[str, Any]) -> list[Table]:
    tables = []
    for title, rows in (("queue", snap["queue"]), ("boxes", snap["boxes"]),
                        ("last verdicts", snap["verdicts"]), ("box time", snap["box_time"]),
                        ("unpublished", snap.get("unpublished", []))):
        table = Table(title=f"{title} ({len(rows)})")
        columns = list(rows[0]) if rows else ["(empty)"]
        for col in columns:
            table.add_column(col)
        for row in rows:
            table.add_row(*(_cell(row[c]) for c in columns))
        tables.append(table)
    return tables


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return "-" if value is None else str(value)
