"""The per-cell sequential decision on paired samples (numpy only; the bot replays it to grade).

Rule, per cell, at look k with n pairs (the full text is in docs/statistics.md):
  r_i = ln(head_i / base_i)   (ln(base_i / head_i) when lower is better), m = mean(r), S = sd(r)
  f   = the box's calibrated sd of r for this cell (the floor)
  directional half-width  h = max(t_k * S, z_k * f) / sqrt(n)   family- and look-corrected
  equivalence half-width  e = max(u_k * S, w_k * f) / sqrt(n)   per cell (TOST)
  improved   if m - h > 0 and m >= ln(1 + s)          significant and material
  regressed  if m + h < 0 and m <= ln(1 - t)
  neutral    if m - e > ln(1 - t) and m + e < ln(1 + s)   no material change either way
  otherwise undecided; undecided at the last look (or out of budget) is inconclusive.
Taking the wider of the t-interval on the sample sd and the z-interval on the floor keeps the
coverage whichever of the two is right: a small sample's sd can be far too small, and a floor
calibrated on a quieter day can be too small. The bot computes every critical value; the harness
and the grader only apply them, with exactly this arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

DECISIONS = ("undecided", "improved", "regressed", "neutral")  # index = decision code
UNDECIDED, IMPROVED, REGRESSED, NEUTRAL = range(4)


@dataclass(frozen=True)
class Bounds:
    """The critical values of one look, as the bot computed them."""

    pairs: int
    directional: float  # t quantile, multiplies the sample sd (improved / regressed)
    directional_floor: float  # normal quantile, multiplies the calibrated floor
    equivalence: float  # t quantile for the per-cell equivalence (neutral) test
    equivalence_floor: float


@dataclass(frozen=True)
class Look:
    pairs: int
    estimate: float  # speedup, exp(m) - 1
    lo: float  # directional (simultaneous) interval, as speedups
    hi: float
    eq_lo: float  # equivalence interval, as speedups
    eq_hi: float
    sd: float  # sample sd of the log-ratio (inf with fewer than two pairs)
    decision: str

    def to_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def log_ratios(
    base: Sequence[float], head: Sequence[float], higher_is_better: bool = True
) -> np.ndarray:
    """Per-pair log-ratio, oriented so that positive always means the head is better."""
    b = np.asarray(base, dtype=float)
    h = np.asarray(head, dtype=float)
    if b.shape != h.shape:
        raise ValueError(f"unpaired samples: {b.size} base vs {h.size} head")
    if np.any(~(b > 0)) or np.any(~(h > 0)):
        raise ValueError("samples must be positive rates")
    r = np.log(h / b)
    return r if higher_is_better else -r


def half_widths(
    sd: np.ndarray, n: np.ndarray | int, bounds: Bounds, sd_floor: np.ndarray | float
) -> tuple[np.ndarray, np.ndarray]:
    """(directional, equivalence) half-widths of the interval on the mean log-ratio."""
    root = np.sqrt(n)
    directional = np.maximum(bounds.directional * sd, bounds.directional_floor * sd_floor) / root
    equivalence = np.maximum(bounds.equivalence * sd, bounds.equivalence_floor * sd_floor) / root
    return directional, equivalence


def decide(
    mean: np.ndarray,
    sd: np.ndarray,
    bounds: Bounds,
    sd_floor: np.ndarray | float,
    significance: float,
    tolerance: float,
) -> np.ndarray:
    """Decision codes for any array of cells at one look (vectorised; the simulator uses it)."""
    h, e = half_widths(sd, bounds.pairs, bounds, sd_floor)
    up, down = math.log1p(significance), math.log1p(-tolerance)
    out = np.full(np.shape(mean), UNDECIDED, dtype=np.int8)
    out[(mean - e > down) & (mean + e < up)] = NEUTRAL
    out[(mean + h < 0) & (mean <= down)] = REGRESSED
    out[(mean - h > 0) & (mean >= up)] = IMPROVED
    return out


def look(
    ratios: np.ndarray, bounds: Bounds, sd_floor: float, significance: float, tolerance: float
) -> Look:
    """Apply the rule once to the first `bounds.pairs` pairs."""
    n = bounds.pairs
    if ratios.size < n:
        raise ValueError(f"look at {n} pairs but only {ratios.size} measured")
    r = ratios[:n]
    m = float(np.mean(r))
    sd = float(np.std(r, ddof=1)) if n > 1 else math.inf
    code = decide(np.array(m), np.array(sd), bounds, sd_floor, significance, tolerance)
    h, e = (float(x) for x in half_widths(np.array(sd), n, bounds, sd_floor))
    return Look(n, math.expm1(m), _expm1(m - h), _expm1(m + h), _expm1(m - e), _expm1(m + e),
                sd, DECISIONS[int(code)])


def _expm1(x: float) -> float:
    return math.expm1(x) if math.isfinite(x) else x


def sequential(
    ratios: np.ndarray,
    schedule: Sequence[Bounds],
    sd_floor: float,
    significance: float,
    tolerance: float,
) -> list[Look]:
    """Replay the looks over pairs in measured order; stop at the first decided look."""
    out: list[Look] = []
    for bounds in schedule:
        if bounds.pairs > ratios.size:
            break
        current = look(ratios, bounds, sd_floor, significance, tolerance)
        out.append(current)
        if current.decision != "undecided":
            break
    return out


def final_decision(looks: Sequence[Look]) -> str:
    """The cell's outcome: the deciding look's decision, else inconclusive."""
    if looks and looks[-1].decision != "undecided":
        return looks[-1].decision
    return "inconclusive"
