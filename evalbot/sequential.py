"""Per-look critical values for the on-box stopping rule (bot side: scipy lives here, not on the box).

Two kinds of error, two levels (docs/statistics.md):
- A false *verdict* (improved or regressed without a real change) is controlled per PR: alpha is
  split by Bonferroni over every cell of the family (guards included) and every look, two-sided.
- Calling a cell *neutral* is an equivalence statement (TOST): its error is missing a material
  change, which the simulator's power figures measure; it uses a per-cell, per-look level.
Each level gives a Student t quantile with n_k - 1 degrees of freedom (multiplies the sample sd)
and a normal quantile (multiplies the box's calibrated sd floor, treated as known).
"""

from __future__ import annotations

from collections.abc import Sequence

from scipy import stats as sps

from engine.stats import Bounds

EQUIVALENCE_ALPHA = 0.05  # one-sided level of each TOST half, per cell and look
DIGITS = 6  # critical values travel in JSON: round so the replay compares equal numbers


def schedule(looks: Sequence[int], family: int, alpha: float,
             equivalence_alpha: float = EQUIVALENCE_ALPHA) -> list[Bounds]:
    """The critical values of every look for a family of `family` cells."""
    if family < 1 or not looks:
        raise ValueError("need at least one cell and one look")
    if any(n < 2 for n in looks):
        raise ValueError(f"looks {list(looks)}: each look needs at least 2 pairs")
    if not (0 < alpha < 1 and 0 < equivalence_alpha < 0.5):
        raise ValueError(f"alpha {alpha} / equivalence alpha {equivalence_alpha} out of range")
    tail = alpha / (2 * family * len(looks))  # one tail of a two-sided Bonferroni test
    z = _r(sps.norm.isf(tail))
    w = _r(sps.norm.isf(equivalence_alpha))
    return [Bounds(pairs=n, directional=_r(sps.t.isf(tail, df=n - 1)), directional_floor=z,
                   equivalence=_r(sps.t.isf(equivalence_alpha, df=n - 1)), equivalence_floor=w)
            for n in looks]


def critical_values(looks: Sequence[int], family: int, alpha: float) -> list[float]:
    """The directional t quantile per look (the rule's `critical` list)."""
    return [b.directional for b in schedule(looks, family, alpha)]


def _r(x: float) -> float:
    return round(float(x), DIGITS)
