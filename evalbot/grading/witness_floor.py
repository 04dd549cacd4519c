"""Is a witness's floor on a box stale? Its recent jobs' own pairs say so, without box time. Pure.

A witness's floor (`sd_floor_s`, `floor_df`) is the sd of a pair's saving measured by an A/A on
the box (`evalbot calibrate`), or the profile's from another box. Every job that ran the witness
kept its processes' times. main's processes of two consecutive pairs, B H | H B in ABBA order,
are an A/A pair of their own: main against main, one box, minutes apart. Their differences
(pairs 0 and 1, 2 and 3, ...) have the floor's sd while the floor holds, whatever the head
does, and a head cannot make them noisy by being noisy itself: only main's processes count, so
a PR that scatters its own witness times cannot get another PR's confirmation withheld.

The floor is stale when those differences, pooled over the box's recent jobs judged under that
floor, are significantly and materially noisier than it: the variance ratio above its F
quantile at NOISIER_ALPHA, and the sd ratio above NOISIER_RATIO (the witnesses' rule already
holds false confirmations within 1% at 3x the floor: docs/statistics.md section 7; a stale flag
is what tells the operator, and it stops the witness from confirming at all). It needs at least
MIN_DIFFERENCES differences from MIN_JOBS jobs: one job's box hiccup is not a box that changed.
A floor measured again (a newer calibration) starts afresh: only jobs judged under it count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalbot.grading import quantiles

NOISIER_ALPHA = 0.01  # one-sided F test of the pairs' variance against the floor's
NOISIER_RATIO = 1.5  # the smallest sd ratio (pairs / floor) that counts
MIN_DIFFERENCES = 6
MIN_JOBS = 2
RECENT_JOBS = 20  # the newest jobs of a witness under its floor that the test pools


@dataclass(frozen=True)
class WitnessRun:
    """One job's record of one witness, as the store keeps it (evalbot.store.witness_runs)."""

    name: str
    sd_floor_s: float  # the floor the job judged it with (0: none)
    floor_df: int
    samples: Sequence[Mapping[str, Any]]
    created: float  # when the job's verdict was recorded (epoch s)


@dataclass(frozen=True)
class FloorCheck:
    witness: str
    floor_s: float
    floor_df: int
    measured_s: float | None  # the sd of main's A/A differences of the recent jobs (None: none)
    df: int  # how many differences
    jobs: int  # from how many jobs
    stale: bool

    @property
    def ratio(self) -> float | None:
        return None if self.measured_s is None else self.measured_s / self.floor_s

    def text(self) -> str:
        """What the check found, in a line (the witness named by the caller)."""
        if self.measured_s is None:
            return f"floor {self.floor_s:.4f} s, no recent pairs of main"
        found = (f"main's pairs {self.measured_s:.4f} s vs floor {self.floor_s:.4f} s "
                 f"({self.ratio:.1f}x over {self.df} pairs of {self.jobs} jobs)")
        return f"stale, run `evalbot calibrate`: {found}" if self.stale else f"holds: {found}"


def noisier(floor: tuple[float, int], today: tuple[float, int], ratio: float = NOISIER_RATIO,
            alpha: float = NOISIER_ALPHA) -> bool:
    """Whether today's (sd, df) is significantly (one-sided F test at alpha) and materially
    (sd ratio above `ratio`) noisier than the floor's (sd, df)."""
    (sd0, v0), (sd1, v1) = floor, today
    if v0 < 1 or v1 < 1:
        raise ValueError(f"need at least 1 degree of freedom on each side, got {v0} and {v1}")
    if sd0 <= 0:
        return sd1 > 0
    p = float(quantiles.f_sf((sd1 / sd0) ** 2, v1, v0))
    return sd1 / sd0 > ratio and p < alpha


def main_differences(samples: Iterable[Mapping[str, Any]]) -> list[float]:
    """main's time in pair 2i less its time in pair 2i + 1, over the kept pairs in order whose
    main process ran cleanly (module docstring)."""
    main = sorted((int(s["pair"]), float(s["seconds"])) for s in samples
                  if s["side"] == "base" and not s["dropped"] and not s.get("error"))
    seconds = [t for _, t in main]
    return [a - b for a, b in zip(seconds[0::2], seconds[1::2], strict=False)]


def check(runs: Iterable[WitnessRun],
          calibrated: Mapping[str, tuple[float, float]]) -> list[FloorCheck]:
    """Each witness's floor against its recent jobs' main pairs. `runs`: the box's records of
    one profile, any order; `calibrated`: witness name -> (the box's stored floor, when it was
    measured), where `evalbot calibrate` or the periodic A/A measured one."""
    by_name: dict[str, list[WitnessRun]] = {}
    for run in sorted(runs, key=lambda r: r.created, reverse=True):
        if run.sd_floor_s > 0:  # a witness without a floor judges on its own sd: nothing to stale
            by_name.setdefault(run.name, []).append(run)
    return [_check(name, found, calibrated.get(name)) for name, found in sorted(by_name.items())]


def _check(name: str, runs: list[WitnessRun], stored: tuple[float, float] | None) -> FloorCheck:
    """runs: newest first."""
    floor = stored[0] if stored is not None else runs[0].sd_floor_s
    since = stored[1] if stored is not None else -math.inf
    under = [r for r in runs if math.isclose(r.sd_floor_s, floor, rel_tol=1e-9)
             and r.created > since][:RECENT_JOBS]
    floor_df = under[0].floor_df if under else runs[0].floor_df
    per_job = [d for d in (main_differences(r.samples) for r in under) if d]
    diffs = [x for d in per_job for x in d]
    if not diffs:
        return FloorCheck(name, floor, floor_df, None, 0, 0, False)
    sd = math.sqrt(sum(x * x for x in diffs) / len(diffs))  # about 0: both are main's
    stale = (len(diffs) >= MIN_DIFFERENCES and len(per_job) >= MIN_JOBS
             and noisier((floor, max(floor_df, 1)), (sd, len(diffs))))
    return FloorCheck(name, floor, floor_df, sd, len(diffs), len(per_job), stale)


def stale_names(checks: Iterable[FloorCheck]) -> frozenset[str]:
    return frozenset(c.witness for c in checks if c.stale)
