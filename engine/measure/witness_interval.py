"""The interval on a witness's mean per-pair saving: one function for the harness's stop rule
(engine/measure/witness.py `settled`) and the bot's judgement (evalbot/grading/confirmation.py),
so the two cannot disagree on the same pairs.

The per-pair sd is the witness's own S (n - 1 df) or, where the profile gives a calibrated floor
f of the witness on its box (`sd_floor_s`, `floor_df` = v), S pooled with it as the speed cells
pool theirs (engine/measure/stats.py `pooled_sd`, v + n - 1 df): a t quantile at 3 df would
otherwise make the first look of 4 pairs nearly useless. A sample that refutes the floor
(S^2 > guard f^2, an F test) is judged on its own S: a stale floor or a head that adds noise
cannot narrow the interval. Under the witnesses' rule 2 the floor counts for at most as many
degrees of freedom as the pairs (the look's `floor_df`) and the guard is the F test's median
(evalbot/grading/confirmation.py): a floor the box has outgrown, which the guard cannot see in
3 pairs, can then narrow the interval by a little, not by half. The bot computes every critical
value; this module only applies them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .stats import pooled_sd

MIN_RELATIVE_SD = 0.001  # floor on the per-pair sd, as a share of main's witness time


@dataclass(frozen=True)
class Floor:
    """A witness's calibrated sd of the per-pair saving (seconds) and its degrees of freedom;
    0: no calibration, the own sd only."""

    sd_s: float = 0.0
    df: int = 0

    @property
    def given(self) -> bool:
        return self.sd_s > 0 and self.df > 0


NO_FLOOR = Floor()


@dataclass(frozen=True)
class Critical:
    """One look's critical values as the bot computed them: t quantiles of confirmation (lower
    bound) and contradiction (upper bound) for the own sd and for the pooled sd, the guard, and
    the degrees of freedom the floor counts for at this look (0: its own, `Floor.df`). A pooled
    value of 0 means none was computed: the own sd is used."""

    lower: float
    upper: float = math.inf
    lower_pooled: float = 0.0
    upper_pooled: float = math.inf
    guard: float = 0.0
    floor_df: int = 0


class Interval(NamedTuple):
    mean: float
    lo: float
    hi: float
    sd: str  # which sd the bounds used: "pooled" or "own"


def saving_interval(d: np.ndarray, base_s: float, crit: Critical,
                    floor: Floor = NO_FLOOR) -> Interval:
    """(mean, lower, upper, sd used) of the mean per-pair saving d (main's time minus the
    head's, seconds); the sd is floored (identical times are not infinite certainty)."""
    n = len(d)
    own_sd = float(np.std(d, ddof=1))
    sd, pooled = own_sd, False
    if floor.given and crit.guard > 0 and crit.lower_pooled > 0:
        used, own = pooled_sd(own_sd, floor.sd_s, n - 1, crit.floor_df or floor.df, crit.guard)
        sd, pooled = float(used), not bool(own)
    sd = max(sd, MIN_RELATIVE_SD * base_s, 1e-6)
    lo_t, hi_t = (crit.lower_pooled, crit.upper_pooled) if pooled else (crit.lower, crit.upper)
    mean, root = float(np.mean(d)), math.sqrt(n)
    return Interval(mean, mean - lo_t * sd / root, mean + hi_t * sd / root,
                    "pooled" if pooled else "own")


def rules_out(d: np.ndarray, base_s: float, crit: Critical, floor: Floor, bound_s: float) -> bool:
    """Does the harness's clock rule out a slowdown? The equivalence half of a TOST: the mean
    per-pair saving's lower bound at `crit.lower` (the bot's equivalence level, split over the
    witness's looks) lies above `bound_s`, minus the regression threshold's seconds of a cell's
    work plus what else could hide it (engine/measure/witness.py `believed_above`). One function
    for the harness's stop (witness.py `settled`) and the bot's belief in an unchanged cell
    (evalbot/grading/confirmation.py), so the two cannot disagree on the same pairs."""
    return saving_interval(d, base_s, crit, floor).lo > bound_s
