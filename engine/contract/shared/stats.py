"""The per-cell sequential decision on paired samples (numpy only; the bot replays it to grade).

Rule, per cell, at look k with n pairs (the full text is in docs/statistics.md):
  r_i = ln(head_i / base_i)   (ln(base_i / head_i) when lower is better), m = mean(r), S = sd(r)
  f, v = the calibrated sd of r for this cell and its degrees of freedom (`pool_df`)
  pooled sd  P = sqrt((v f^2 + (n-1) S^2) / (v + n - 1)), with v + n - 1 degrees of freedom;
             the cell's own S (n - 1 df) instead when S^2 > G_k f^2 (G_k an F quantile: the
             sample refutes the calibration, the box got noisier) or when all cells of the
             run together refute it (calibration_refuted: a chi-square test over the run)
  directional half-width  h = c_k P / sqrt(n)   family- and look-corrected t quantile
  equivalence half-width  e = u_k P / sqrt(n)   per cell (TOST)
  tier half-width         g = q_k P / sqrt(n)   90% two-sided
  improved   if m - h > 0, m >= ln(1 + s) and the tier is settled: (version 1) g <= half the
             narrowest width of m's tier and its neighbours; version 2 below
  improving  if m - h > 0, m >= ln(1 + s) but the tier is not settled: keep measuring
  regressed  if m + h < 0 and m <= ln(1 - t)
  slower     if neutral below and m + h < 0: significantly slower, by less than t
  neutral    if m - e > ln(1 - t) and m + e < ln(1 + s)   no material change either way
  otherwise undecided. A cell stops at its first improved/regressed/neutral/slower look; at
  its last look an improving cell is improved (its tier unsettled), an undecided one inconclusive.
Two signs in the bot's per-look values (rules since issue 33, `rule_version` 2; older results
carry none and replay as they were):
  a negative directional value (`critical`, `critical_floor`): too few pairs for a verdict
             (fewer than the rule's verdict_pairs): the look can say neutral or keep measuring,
             never improved, regressed or slower. A fault of whole processes (a slow first test
             in a third of them) lines up in every one of n pairs with probability 2 (2/9)^n:
             10% at 2 pairs, 0.5% at 4, 0.1% at 5, and no spread test can see it.
  a negative settle value (`settle`, `settle_floor`): the tier is settled when g is at most half
             the estimate's own tier and m -+ 1.5 g excludes its neighbours' centres (tier_own),
             not when g is half the narrowest neighbouring tier (tier_settled: 2.2-2.8x the
             fixed-n pairs at the S centre).
Pooling spends the calibration's degrees of freedom on the small early looks instead of paying
for them twice (a t quantile at 2 df and a floor); the guards keep the coverage when the
calibration is stale. A rule without `pool_df` is the first rule: h = max(t S, z f) / sqrt(n).
The bot computes every critical value; the harness and the grader only apply them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

# index = decision code; improving is the one undecided code that is also significant
DECISIONS = ("undecided", "improved", "regressed", "neutral", "improving", "slower")
UNDECIDED, IMPROVED, REGRESSED, NEUTRAL, IMPROVING, SLOWER = range(6)
FINAL = ("improved", "regressed", "neutral", "slower")  # a look with one of these stops the cell
JOINT_GUARD_Z = 2.326348  # normal quantile of 0.99: the run-wide test of the calibration
# a tier settles only when m -+ NEIGHBOUR_MARGIN g excludes its neighbours' centres (tier_own)
NEIGHBOUR_MARGIN = 1.5


@dataclass(frozen=True)
class Bounds:
    """The critical values of one look, as the bot computed them."""

    pairs: int
    directional: float  # t quantile at n - 1 df, multiplies the cell's own sd
    directional_floor: float  # the same level for the pooled sd (first rule: normal x floor)
    equivalence: float  # t quantile for the per-cell equivalence (neutral) test
    equivalence_floor: float
    settle: float = 0.0  # 95% two-sided t quantile of the tier interval, own sd
    settle_floor: float = 0.0  # ... pooled sd
    guard: float = 0.0  # F quantile: S^2 > guard f^2 refutes the calibration
    pool_df: int = 0  # degrees of freedom of the calibrated sd; 0: the first (max) rule


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
    # the lower end of the tier interval m - g, as a speedup (the estimate where there is no tier
    # test): a tier still unsettled at the last look is judged on it (rule version 2, grading)
    tier_lo: float = math.nan

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


def calibration_refuted(sd: np.ndarray, sd_floor: np.ndarray, n: int) -> np.ndarray:
    """Do all cells of a run together say the box is noisier than its calibration?

    sd, sd_floor: the run's cells on the last axis. Under the calibration sum (n-1) S^2 / f^2
    is chi-square with cells x (n-1) degrees of freedom; its 99% quantile by Wilson-Hilferty
    (arithmetic only: the harness has no scipy). One cell's F guard has little power at a few
    pairs; a whole run's cells have enough, so a stale floor cannot narrow early intervals.
    """
    sd, floor = np.asarray(sd, dtype=float), np.asarray(sd_floor, dtype=float)
    k = sd.shape[-1] * (n - 1)
    q = np.sum((n - 1) * sd * sd / np.maximum(floor * floor, 1e-300), axis=-1)
    c = 2 / (9 * k)
    return np.asarray(q > k * (1 - c + JOINT_GUARD_Z * math.sqrt(c)) ** 3)


def refuted_per_look(ratios: Sequence[np.ndarray], floors: Sequence[float],
                     schedule: Sequence[Bounds]) -> list[bool]:
    """calibration_refuted at each look for one run's cells (all False for the first rule)."""
    out = []
    for b in schedule:
        if b.pool_df <= 0 or not ratios or any(r.size < b.pairs for r in ratios):
            out.append(False)
            continue
        sds = np.array([np.std(r[: b.pairs], ddof=1) for r in ratios])
        out.append(bool(calibration_refuted(sds, np.asarray(floors, dtype=float), b.pairs)))
    return out


def half_widths(
    sd: np.ndarray, n: np.ndarray | int, bounds: Bounds, sd_floor: np.ndarray | float,
    refuted: np.ndarray | bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(directional, equivalence, tier) half-widths of the interval on the mean log-ratio;
    `refuted`: the run's cells refuted the calibration (calibration_refuted)."""
    root = np.sqrt(n)
    sd, floor = np.asarray(sd, dtype=float), np.asarray(sd_floor, dtype=float)
    b = bounds
    c, cf, q, qf = (abs(b.directional), abs(b.directional_floor), abs(b.settle),
                    abs(b.settle_floor))  # the signs select tests (module docstring)
    if b.pool_df <= 0:  # the first rule: the wider of t on S and z on the floor; no tier test
        directional = np.maximum(c * sd, cf * floor) / root
        equivalence = np.maximum(b.equivalence * sd, b.equivalence_floor * floor) / root
        return directional, equivalence, np.zeros(np.broadcast(directional, sd).shape)
    used, own = pooled_sd(sd, floor, b.pairs - 1, b.pool_df, b.guard, refuted)
    return (np.where(own, c, cf) * used / root,
            np.where(own, b.equivalence, b.equivalence_floor) * used / root,
            np.where(own, q, qf) * used / root)


def pooled_sd(sd: np.ndarray | float, floor: np.ndarray | float, df: int, pool_df: int,
              guard: float, refuted: np.ndarray | bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(the sd an interval uses, whether it is the sample's own): S pooled with the calibrated
    floor f (pool_df df) as sqrt((v f^2 + df S^2) / (v + df)); S itself where there is no floor,
    where S^2 > guard f^2 (the sample refutes the calibration) or where `refuted`. Speed cells
    and witnesses (engine/contract/shared/witness_interval.py) share it."""
    sd, floor = np.asarray(sd, dtype=float), np.asarray(floor, dtype=float)
    own = (floor <= 0) | (sd * sd > guard * floor * floor) | np.asarray(refuted)
    pooled = np.sqrt((pool_df * floor * floor + df * sd * sd) / max(pool_df + df, 1))
    return np.where(own, sd, pooled), own


def tier_settled(mean: np.ndarray, half_width: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The tier interval m -+ g is no wider than the narrowest of the estimate's tier and its
    two neighbours (edges: ascending thresholds in log-ratio space; the top tier counts as wide
    as the one under it, and below the first edge is the first tier). The narrowest neighbour
    matters: an estimate in a wide tier next to a narrow one must not settle on the precision
    of the wide tier when the truth may sit in the narrow one."""
    edges = np.asarray(edges, dtype=float)
    mean = np.asarray(mean, dtype=float)
    widths = np.diff(edges, axis=-1)
    widths = np.concatenate([widths, widths[..., -1:]], axis=-1)  # the top tier
    padded = np.concatenate([widths[..., :1], widths, widths[..., -1:]], axis=-1)
    near = np.minimum(np.minimum(padded[..., :-2], padded[..., 1:-1]), padded[..., 2:])
    near = np.broadcast_to(near, mean.shape + near.shape[-1:])
    idx = np.clip((mean[..., None] >= edges).sum(axis=-1) - 1, 0, edges.shape[-1] - 1)
    return half_width <= np.take_along_axis(near, idx[..., None], axis=-1)[..., 0] / 2


def tier_own(mean: np.ndarray, half_width: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The tier interval m -+ g is no wider than the estimate's own tier (g at most half its
    width; the lowest tier from the first edge, the top one as wide as the one under it) and
    excludes the centres of its two neighbouring tiers (the lowest has none below, the top none
    above). Precision on the own tier stops an effect at a tier's centre at about the fixed-n
    pairs of that tier; the neighbours' centres keep an effect at a narrower neighbour's centre
    from settling early in the wider tier."""
    edges = np.asarray(edges, dtype=float)
    mean = np.asarray(mean, dtype=float)
    count = edges.shape[-1]
    widths = np.diff(edges, axis=-1)
    widths = np.concatenate([widths, widths[..., -1:]], axis=-1)  # the top tier
    centres = edges + widths / 2
    pad = np.full(edges.shape[:-1] + (1,), np.nan)
    below = np.concatenate([pad, centres[..., :-1]], axis=-1)  # the lower neighbour's centre
    above = np.concatenate([centres[..., 1:], pad], axis=-1)
    idx = np.clip((mean[..., None] >= edges).sum(axis=-1) - 1, 0, count - 1)[..., None]

    def at(row: np.ndarray) -> np.ndarray:
        return np.take_along_axis(np.broadcast_to(row, mean.shape + (count,)), idx, axis=-1)[..., 0]

    lo, hi = at(below), at(above)
    return ((half_width <= at(widths) / 2) & ~(mean - NEIGHBOUR_MARGIN * half_width <= lo)
            & ~(mean + NEIGHBOUR_MARGIN * half_width >= hi))


def decide(
    mean: np.ndarray,
    sd: np.ndarray,
    bounds: Bounds,
    sd_floor: np.ndarray | float,
    significance: float,
    tolerance: float,
    edges: np.ndarray | None = None,
    refuted: np.ndarray | bool = False,
) -> np.ndarray:
    """Decision codes for any array of cells at one look (vectorised; the simulator uses it).

    `edges` are the tier thresholds of each cell in log-ratio space (None: no tier test).
    """
    h, e, g = half_widths(sd, bounds.pairs, bounds, sd_floor, refuted)
    up, down = math.log1p(significance), math.log1p(-tolerance)
    out = np.full(np.shape(mean), UNDECIDED, dtype=np.int8)
    neutral = (mean - e > down) & (mean + e < up)
    out[neutral] = NEUTRAL
    out[neutral & (mean + h < 0)] = SLOWER
    out[(mean + h < 0) & (mean <= down)] = REGRESSED
    verdict = bounds.directional_floor >= 0  # negative: too few pairs for a verdict
    if not verdict:  # in the equivalence region it is neutral; a regression waits
        out[out == SLOWER] = NEUTRAL
        out[out == REGRESSED] = UNDECIDED
    significant = (mean - h > 0) & (mean >= up) & verdict
    settle = tier_own if bounds.settle_floor < 0 else tier_settled
    settled = True if edges is None or np.size(edges) == 0 else settle(mean, g, edges)
    out[significant] = IMPROVING
    out[significant & settled] = IMPROVED
    return out


def look(
    ratios: np.ndarray, bounds: Bounds, sd_floor: float, significance: float, tolerance: float,
    edges: Sequence[float] | None = None, refuted: bool = False,
) -> Look:
    """Apply the rule once to the first `bounds.pairs` pairs."""
    n = bounds.pairs
    if ratios.size < n:
        raise ValueError(f"look at {n} pairs but only {ratios.size} measured")
    r = ratios[:n]
    m = float(np.mean(r))
    sd = float(np.std(r, ddof=1)) if n > 1 else math.inf
    tiers = np.asarray(edges, dtype=float) if edges else None
    code = decide(np.array(m), np.array(sd), bounds, sd_floor, significance, tolerance, tiers,
                  refuted)
    h, e, g = (float(x) for x in half_widths(np.array(sd), n, bounds, sd_floor, refuted))
    return Look(n, math.expm1(m), _expm1(m - h), _expm1(m + h), _expm1(m - e), _expm1(m + e),
                sd, DECISIONS[int(code)], _expm1(m - g))


def _expm1(x: float) -> float:
    return math.expm1(x) if math.isfinite(x) else x


def sequential(
    ratios: np.ndarray,
    schedule: Sequence[Bounds],
    sd_floor: float,
    significance: float,
    tolerance: float,
    edges: Sequence[float] | None = None,
    refuted: Sequence[bool] = (),
) -> list[Look]:
    """Replay the looks over pairs in measured order; stop at the first decided look.
    `refuted[k]`: the run refuted the calibration at look k (none given: it did not)."""
    out: list[Look] = []
    for k, bounds in enumerate(schedule):
        if bounds.pairs > ratios.size:
            break
        current = look(ratios, bounds, sd_floor, significance, tolerance, edges,
                       bool(refuted[k]) if k < len(refuted) else False)
        out.append(current)
        if current.decision in FINAL:
            break
    return out


def final_decision(looks: Sequence[Look]) -> str:
    """The cell's outcome: the deciding look's decision; a cell still settling its tier at its
    last look is improved; anything else is inconclusive."""
    if looks and looks[-1].decision in FINAL:
        return looks[-1].decision
    if looks and looks[-1].decision == "improving":
        return "improved"
    return "inconclusive"


def final_codes(codes: np.ndarray) -> np.ndarray:
    """final_decision on codes (vectorised): improving becomes improved, undecided stays."""
    return np.where(codes == IMPROVING, IMPROVED, codes).astype(np.int8)
