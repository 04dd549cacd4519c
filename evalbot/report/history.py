"""What the dashboard plots, read from the store's verdict history (pure functions over rows).

- Main's speed: every verdict measured main (its base SHA) next to the PR; each cell's
  `base_median` is one observation of main at that time, on that box.
- Steps: main's level changes when its SHA changes; the step is credited to the PR merged into
  that SHA (the merges table below, else a PR whose evaluated head is that very SHA).
- Noise: the sd of the per-pair log-ratio ln(head/base) of each cell, as its last look
  recorded it. A/A calibrations (`evalbot calibrate`) are the better source where present;
  they enter as NoisePoint rows with source "calibration" (see `noise_points`).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from statistics import median
from typing import Any


@dataclass(frozen=True)
class Level:
    """Main at one SHA on one box: the median of its observations."""
    sha: str
    first: float
    value: float
    observations: int


@dataclass(frozen=True)
class Step:
    time: float
    from_sha: str
    to_sha: str
    change: float  # new level / old level - 1
    value: float
    pr: int | None
    pr_estimate: tuple[float, float, float] | None  # the PR's own measurement: speedup, lo, hi


@dataclass(frozen=True)
class Series:
    """Main's journey for one cell of one repo on one box."""
    repo: str
    model: str
    metric: str
    ctx: int
    unit: str
    box: str
    times: list[float]
    values: list[float]
    levels: list[Level]
    steps: list[Step]


@dataclass(frozen=True)
class NoisePoint:
    box: str
    cell: str  # model/metric@ctx
    time: float
    sd: float  # sd of the per-pair log-ratio
    pairs: int
    source: str  # "verdict" or "calibration"


def box_label(provenance: dict[str, Any]) -> str:
    """A box's public name: the configured box name when recorded, else its GPU or CPU kind."""
    box = provenance.get("box") or {}
    if box.get("name"):
        return str(box["name"])
    gpu = box.get("gpu_start") or {}
    if gpu.get("name"):
        return str(gpu["name"])
    return f"{box.get('machine', '?')} CPU ({box.get('cpus', '?')} cores)"


def main_series(rows: list[dict[str, Any]], merged: dict[tuple[str, str], int]) -> list[Series]:
    """Per (repo, model, metric, ctx, box): main's observations, levels per SHA and steps."""
    rows = sorted(rows, key=lambda r: r["created"])
    points: dict[tuple[str, str, str, int, str], list[tuple[float, str, float, str]]] = \
        defaultdict(list)
    for row in rows:
        box = box_label(row["verdict"].get("provenance", {}))
        for c in row["verdict"].get("cells", []):
            if c.get("base_median") is not None:
                points[(row["repo"], c["model"], c["metric"], c["ctx"], box)].append(
                    (row["created"], row["base_sha"], float(c["base_median"]), c["unit"]))
    estimates = _pr_estimates(rows)
    out = []
    for (repo, model, metric, ctx, box), obs in sorted(points.items()):
        levels = _levels(obs)
        heads = {r["head_sha"]: r["pr"] for r in rows if r["repo"] == repo and r["pr"]}
        steps = [_step(a, b, merged.get((repo, b.sha), heads.get(b.sha)),
                       estimates, (repo, f"{model}/{metric}@{ctx}"))
                 for a, b in zip(levels, levels[1:], strict=False)]
        out.append(Series(repo, model, metric, ctx, obs[0][3], box, [o[0] for o in obs],
                          [o[2] for o in obs], levels, steps))
    return out


def _levels(obs: list[tuple[float, str, float, str]]) -> list[Level]:
    """Consecutive observations of the same SHA form one level (main can return to a SHA only
    by a revert, which is a new step)."""
    levels: list[Level] = []
    group: list[tuple[float, str, float, str]] = []
    for o in obs + [(math.inf, "", 0.0, "")]:
        if group and o[1] != group[0][1]:
            levels.append(Level(group[0][1], group[0][0], median(g[2] for g in group), len(group)))
            group = []
        group.append(o)
    return levels


def _step(a: Level, b: Level, pr: int | None,
          estimates: dict[tuple[str, str, int], tuple[float, float, float]],
          where: tuple[str, str]) -> Step:
    est = estimates.get((where[0], where[1], pr)) if pr is not None else None
    return Step(b.first, a.sha, b.sha, b.value / a.value - 1, b.value, pr, est)


def _pr_estimates(rows: list[dict[str, Any]]) -> dict[tuple[str, str, int], tuple[float, float, float]]:
    """(repo, cell key, PR) -> the PR's latest measured speedup with its interval."""
    out = {}
    for row in rows:  # oldest first: the latest verdict of a PR wins
        for c in row["verdict"].get("cells", []):
            if row["pr"] is not None and c.get("speedup") is not None:
                out[(row["repo"], c["key"], row["pr"])] = (c["speedup"], c["lo"], c["hi"])
    return out


def calibration_points(kept: list[tuple[str, str, float, int, float]]) -> list[NoisePoint]:
    """The A/A noise `evalbot calibrate` keeps (NoiseStore.history: the latest run per box and
    cell), as points of the noise chart."""
    return [NoisePoint(box, cell, at, sd, pairs, "calibration") for box, cell, sd, pairs, at in kept]


def noise_points(rows: list[dict[str, Any]],
                 calibrations: list[NoisePoint] | None = None) -> list[NoisePoint]:
    """Per box and cell, the noise over time: A/A calibrations first, else from verdicts: the sd
    each cell's last look recorded (published to 3 significant digits, report/publication.py)."""
    points = list(calibrations or [])
    for row in sorted(rows, key=lambda r: r["created"]):
        box = box_label(row["verdict"].get("provenance", {}))
        for cell in row["results"].get("cells", []):
            last = (cell.get("looks") or [{}])[-1]
            sd, pairs = last.get("sd"), int(last.get("pairs") or 0)
            if isinstance(sd, (int, float)) and math.isfinite(sd) and pairs >= 2:
                points.append(NoisePoint(box, f"{cell['model']}/{cell['metric']}@{cell['ctx']}",
                                         row["created"], float(sd), pairs, "verdict"))
    return points


def cell_page(repo: str, model: str, metric: str, ctx: int) -> str:
    """The dashboard page of one cell, relative to the dashboard's root (safe as a file name)."""
    return f"cells/{_slug(repo or 'local')}/{_slug(model)}-{_slug(metric)}-{int(ctx)}.html"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._") or "_"


def recent_main(rows: list[dict[str, Any]], repo: str, box: str,
                limit: int = 12) -> dict[str, list[float]]:
    """Cell key -> main's last levels (one per main SHA, oldest first) on this box: the
    comment's sparkline. Boxes are never mixed."""
    out = {}
    for s in main_series([r for r in rows if r["repo"] == repo], {}):
        if s.box == box:
            out[f"{s.model}/{s.metric}@{s.ctx}"] = [lv.value for lv in s.levels][-limit:]
    return out
