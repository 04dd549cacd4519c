"""A witness's arithmetic, one function each for the harness's stop rule (engine/measure/
witness.py `settled`) and the bot's judgement (evalbot/grading/confirmation.py), so the two cannot
disagree on the same pairs: the interval on its mean per-pair saving, the pairs it is judged on
(`pair_savings`), what the cells' printed rates claim it saves (`claimed_saving`, `others_claims`,
`believed_above`) and the work a head's invented ids may have skipped (`unverified_work_s`).

The per-pair sd is the witness's own S (n - 1 df) or, where the profile gives a calibrated floor
f of the witness on its box (`sd_floor_s`, `floor_df` = v), S pooled with it as the speed cells
pool theirs (engine/contract/shared/stats.py `pooled_sd`, v + n - 1 df): a t quantile at 3 df would
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .stats import pooled_sd

MIN_PAIRS = 3  # the bot judges no witness on fewer verified pairs
FLOOR_STALE = "floor_stale"  # `stopped` of a witness not run: its floor on the box is refuted
SHOWN_FRACTION = 0.5  # a witness that cannot show half of the claimed savings contradicts them
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
    work plus what else could hide it (`believed_above`, below). One function
    for the harness's stop (witness.py `settled`) and the bot's belief in an unchanged cell
    (evalbot/grading/confirmation.py), so the two cannot disagree on the same pairs."""
    return saving_interval(d, base_s, crit, floor).lo > bound_s


# ---- the pairs a witness is judged on, and what the printed rates claim of them --------------

def believed_above(claims: Mapping[str, tuple[float, float]], unchanged: Iterable[str],
                   margin: float) -> float | None:
    """The mean saving's equivalence bound above which each of the `unchanged` cells is
    believed unchanged (issue 53), less the work the head's invented ids may have skipped,
    which the caller adds: the witness margin's (StoppingRule.margin) seconds of the work in one witness
    process (main's time for it, by its printed rates) below the saving the other covered cells
    claim (their positive claims, taken as true, could hide it). Both the harness's stop and the
    bot's belief; None: none to rule out."""
    bounds = [others_claims(claims, k) - margin * claims[k][1] for k in unchanged if k in claims]
    return max(bounds) if bounds else None


def pair_savings(samples: Sequence[Mapping[str, Any]], need_verified: bool) -> np.ndarray:
    """main's time minus the head's, per kept pair with both sides (verified, when asked)."""
    return np.array([p["base"]["seconds"] - p["head"]["seconds"]
                     for p in full_pairs(samples, need_verified)])


def full_pairs(samples: Sequence[Mapping[str, Any]],
               need_verified: bool) -> list[dict[str, Mapping[str, Any]]]:
    """The kept pairs with both sides (verified ones, when asked), each as side -> sample."""
    by_pair: dict[int, dict[str, Mapping[str, Any]]] = {}
    for s in samples:
        if not s["dropped"] and (s.get("verified") or not need_verified):
            by_pair.setdefault(int(s["pair"]), {})[s["side"]] = s
    return [p for p in by_pair.values() if set(p) == {"base", "head"}]


def claimed_saving(samples: Sequence[Mapping[str, Any]], tokens: int,
                   higher_is_better: bool = True) -> tuple[float, float] | None:
    """(seconds one witness process saves if the cell's printed rates are true, main's seconds
    for that work); None: no rates.

    The samples' geometric means (over paired samples) are the graded numbers; a rate that
    falls with the work (higher_is_better false) is a time per token."""
    kept = [s for s in samples if not s["dropped"]]
    base = [s["value"] for s in kept if s["side"] == "base"]
    head = [s["value"] for s in kept if s["side"] == "head"]
    n = min(len(base), len(head))
    if n == 0 or min(base[:n] + head[:n]) <= 0:
        return None
    b, h = (math.exp(float(np.mean(np.log(v[:n])))) for v in (base, head))
    if higher_is_better:
        return tokens * (1.0 / b - 1.0 / h), tokens / b
    return tokens * (b - h), tokens * b


def unverified_work_s(samples: Sequence[Mapping[str, Any]]) -> float:
    """The part of the mean per-pair saving that skipped work may explain. A head process whose
    ids agree with main's on a share a of the positions proves only that share of the work its
    ids stand for (invented ids cost nothing), so it may have saved up to 1 - a of main's time
    for that work without being faster. main's time for it is bounded by what the harness
    measured of main's whole witness process (by the witness's clock; a load or a prompt every
    id depends on is counted too, on the head's side of the bound), not by main's printed
    rates, whose own noise would leave a precise witness a few milliseconds to forge.
    Averaged over the pairs `pair_savings` keeps. A sample without `agreement` (a harness
    before it) counts as agreeing everywhere."""
    full = full_pairs(samples, need_verified=True)
    if not full:
        return 0.0
    share = float(np.mean([1.0 - min(max(float(p["head"].get("agreement", 1.0)), 0.0), 1.0)
                           for p in full]))
    return share * float(np.mean([p["base"]["seconds"] for p in full]))


def others_claims(claims: Mapping[str, tuple[float, float]], key: str) -> float:
    """The saving the other covered cells claim (positive claims only): a cell is confirmed only
    by what is left after taking them as true."""
    return sum(max(v[0], 0.0) for k, v in claims.items() if k != key)
