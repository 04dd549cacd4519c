"""The per-cell sequential decision on paired samples (numpy only; the bot replays it to grade).

Rule, per cell, at look k with n_k pairs (see docs/statistics.md):
  r_i = ln(head_i / base_i)   (ln(base_i / head_i) when lower is better)
  m = mean(r), sd = max(sample sd of r, sd_floor), h = c_k * sd / sqrt(n_k)
  improved     if m - h > 0 and m >= ln(1 + s)          significant and material
  regressed    if m + h < 0 and m <= ln(1 - t)
  neutral      if m - h > ln(1 - t) and m + h < ln(1 + s)   no material change either way
  otherwise undecided; undecided at the last look (or out of budget) is inconclusive.
The critical values c_k come from the bot and already account for the family of cells and the
number of looks, so the harness and the grader apply exactly the same arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

DECISIONS = ("improved", "regressed", "neutral", "inconclusive", "undecided")


@dataclass(frozen=True)
class Look:
    pairs: int
    estimate: float  # speedup, exp(m) - 1
    lo: float  # interval bounds, as speedups
    hi: float
    sd: float  # sd of the log-ratio used (after the floor)
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
    if np.any(b <= 0) or np.any(h <= 0):
        raise ValueError("samples must be positive rates")
    r = np.log(h / b)
    return r if higher_is_better else -r


def look(
    ratios: np.ndarray, critical: float, sd_floor: float, significance: float, tolerance: float
) -> Look:
    """Apply the rule once to all pairs so far."""
    n = int(ratios.size)
    if n == 0:
        return Look(0, 0.0, -math.inf, math.inf, math.inf, "undecided")
    m = float(np.mean(ratios))
    sample_sd = float(np.std(ratios, ddof=1)) if n > 1 else math.inf
    sd = max(sample_sd, sd_floor)
    half = critical * sd / math.sqrt(n)
    lo, hi = m - half, m + half
    up, down = math.log1p(significance), math.log1p(-tolerance)
    if lo > 0 and m >= up:
        decision = "improved"
    elif hi < 0 and m <= down:
        decision = "regressed"
    elif lo > down and hi < up:
        decision = "neutral"
    else:
        decision = "undecided"
    return Look(n, math.expm1(m), _expm1(lo), _expm1(hi), sd, decision)


def _expm1(x: float) -> float:
    return math.expm1(x) if math.isfinite(x) else x


def sequential(
    ratios: np.ndarray,
    looks: Sequence[int],
    critical: Sequence[float],
    sd_floor: float,
    significance: float,
    tolerance: float,
) -> list[Look]:
    """Replay the looks over pairs in measured order; stop at the first decided look."""
    out: list[Look] = []
    for n, c in zip(looks, critical, strict=True):
        if n > ratios.size:
            break
        current = look(ratios[:n], c, sd_floor, significance, tolerance)
        out.append(current)
        if current.decision != "undecided":
            break
    return out


def final_decision(looks: Sequence[Look]) -> str:
    """The cell's outcome: the deciding look's decision, else inconclusive."""
    if looks and looks[-1].decision != "undecided":
        return looks[-1].decision
    return "inconclusive"
