"""Each box's health, one row of `box_health` per check (evalbot/service/health.py runs them): a
worker leases no job for a box whose latest check failed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from evalbot.store import schema


@dataclass(frozen=True)
class Health:
    box: str
    profile: str
    healthy: bool
    reasons: tuple[str, ...]
    worst_ratio: float | None  # the largest sd ratio today/floor over the cells compared
    at: float = field(default_factory=time.time)


class HealthStore:
    """box_health and the box_noise floors it checks against, in the store file."""

    def __init__(self, path: Path) -> None:
        self.db = schema.connect(path, shared=True)

    def floors(self, box: str, profile: str) -> dict[str, tuple[float, int]]:
        rows = self.db.execute("SELECT cell, sd, pairs FROM box_noise WHERE box=? AND profile=?",
                               (box, profile))
        return {cell: (sd, pairs) for cell, sd, pairs in rows}

    def record(self, health: Health) -> None:
        with self.db:
            self.db.execute("INSERT INTO box_health (box, profile, healthy, reasons, worst_ratio,"
                            " at) VALUES (?,?,?,?,?,?)",
                            (health.box, health.profile, int(health.healthy),
                             json.dumps(list(health.reasons)), health.worst_ratio, health.at))

    def latest(self) -> dict[str, Health]:
        """Box -> its latest health check."""
        rows = self.db.execute("SELECT box, profile, healthy, reasons, worst_ratio, at FROM "
                               "box_health WHERE id IN (SELECT MAX(id) FROM box_health "
                               "GROUP BY box)")
        return {b: Health(b, p, bool(h), tuple(json.loads(r)), w, at)
                for b, p, h, r, w, at in rows}

    def healthy_boxes(self, names: Iterable[str]) -> list[str]:
        """The boxes jobs may go to: healthy at their last check, or never checked."""
        latest = self.latest()
        return [n for n in names if n not in latest or latest[n].healthy]

    def close(self) -> None:
        self.db.close()
