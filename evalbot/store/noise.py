"""The box noise floors: the `box_noise` table of the store file, written by `evalbot calibrate`.

The sd of the per-pair log-ratio of each cell, measured by an A/A run on a box, becomes that
cell's sd floor in later jobs on the same box (`NoiseStore.floors` -> jobspec.make_job(sd_floors=...)).
"""

from __future__ import annotations

import time
from pathlib import Path

from evalbot.store import schema

WITNESS_FLOOR = "witness:"  # a witness's floor is kept under this prefix, then its name


class NoiseStore:
    """The box_noise table in the bot's SQLite store file (a connection of its own)."""

    def __init__(self, path: Path) -> None:
        self.db = schema.connect(path)

    def record(self, box: str, profile: str, sha: str, noise: dict[str, tuple[float, int]]) -> None:
        now = time.time()
        with self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO box_noise VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(box, profile, cell, sd, pairs, sha, now) for cell, (sd, pairs) in noise.items()])

    def floors(self, box: str, profile: str) -> dict[str, float]:
        """Cell key -> calibrated sd of the per-pair log-ratio, for make_job(sd_floors=...)."""
        rows = self.db.execute("SELECT cell, sd FROM box_noise WHERE box = ? AND profile = ?",
                               (box, profile))
        return {cell: sd for cell, sd in rows}

    def degrees(self, box: str, profile: str) -> int:
        """The fewest degrees of freedom (pairs - 1) among the box's stored floors."""
        row = self.db.execute("SELECT MIN(pairs) FROM box_noise WHERE box = ? AND profile = ?",
                              (box, profile)).fetchone()
        return max(int(row[0]) - 1, 1) if row and row[0] else 0

    def history(self) -> list[tuple[str, str, float, int, float]]:
        """(box, cell, sd, pairs, when) of every floor kept (the latest run per box and cell),
        oldest first."""
        rows = self.db.execute("SELECT box, cell, sd, pairs, created FROM box_noise "
                               "ORDER BY created")
        return [(r[0], r[1], float(r[2]), int(r[3]), float(r[4])) for r in rows]

    def close(self) -> None:
        self.db.close()
