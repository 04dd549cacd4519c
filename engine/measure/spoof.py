"""Does a head's claimed speed show up in the wall time the harness measured from outside?

An engine reports rates; the harness times each process. If the head claims to save work
(sum over its cells of tokens / rate) that its processes do not save in wall time, its numbers
are not believed: the run's samples witness carries the reason, and the bot makes its improved
cells `unconfirmed` (inconclusive), never `spoofed`: wall times alone are no REJECT (issue 46:
this 99.9% test per run REJECTed about 1 honest gain in 600). A REJECT needs a harness-owned
witness's contradiction (evalbot/grading/confirmation.py). Base and head of one pair share
everything else (model load, start-up), so the difference of their wall times carries the real
saving.
The other direction, time the rates do not account for (a slowdown printed away), is the bot's
(evalbot/grading/unexplained_cost.py, issue 53): pure, from the same samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SHOWN_FRACTION = 0.5  # at least half of a claimed saving must be visible in the wall time
# ... unless the shortfall against the whole claim is within the noise: a one-sided t test at
# 99.9%. A flat 3 sigma at 3-5 pairs is a t test at 95-98%: honest
# heads whose small saving sat inside a busy box's noise were rejected. Tested against half the
# claim instead, the demo's 2x liar got past it on a busy CI machine and its witness confirmed
# it. t quantiles at 0.999 by degrees of freedom:
T_999 = {2: 22.327, 3: 10.215, 4: 7.173, 5: 5.893, 6: 5.208, 7: 4.785, 8: 4.501, 9: 4.297,
         10: 4.144, 11: 4.025, 12: 3.930, 13: 3.852, 14: 3.787, 15: 3.733, 16: 3.686,
         17: 3.646, 18: 3.610, 19: 3.579, 20: 3.552, 25: 3.450, 30: 3.385, 40: 3.307,
         60: 3.232, 120: 3.160}
MIN_SD_S = 0.0005  # a floor on the per-pair sd: identical wall times are not infinite certainty


@dataclass(frozen=True)
class Sample:
    pair: int
    side: str
    wall_s: float
    claimed_s: float  # sum over the run's cells of tokens / reported rate


def unexplained_saving(samples: Sequence[Sample]) -> str | None:
    """A reason when the head's claimed saving is not seen in its wall time, else None."""
    by_pair: dict[int, dict[str, Sample]] = {}
    for s in samples:
        by_pair.setdefault(s.pair, {})[s.side] = s
    full = [p for p in by_pair.values() if set(p) == {"base", "head"}]
    if len(full) < 3:
        return None
    claimed = np.array([p["base"].claimed_s - p["head"].claimed_s for p in full])
    wall = np.array([p["base"].wall_s - p["head"].wall_s for p in full])
    c, w = float(np.mean(claimed)), float(np.mean(wall))
    # Both must be beyond the noise: a claim (a neutral head's rates scatter around main's), and
    # a shortfall (wall times scatter more). A neutral head "claiming" 0.1 ms was called a spoof
    # when its processes happened to run 5 ms longer than main's on a busy machine.
    if w < SHOWN_FRACTION * c and _beyond_noise(claimed) and _beyond_noise(claimed - wall):
        ran = f"only {1000 * w:.1f} ms shorter" if w >= 0 else f"{-1000 * w:.1f} ms longer"
        return (f"head claims to save {1000 * c:.1f} ms of work per sample, but its processes "
                f"ran {ran} than main's (timed by the harness)")
    return None


def _beyond_noise(diffs: np.ndarray) -> bool:
    """Is the mean per-pair difference above zero by a one-sided t test at 99.9%?"""
    sd = max(float(np.std(diffs, ddof=1)), MIN_SD_S)
    return float(np.mean(diffs)) > t_999(len(diffs) - 1) * sd / np.sqrt(len(diffs))


def t_999(df: int) -> float:
    """The one-sided 99.9% t quantile, conservative between tabulated degrees of freedom."""
    known = [d for d in T_999 if d <= df]
    return T_999[max(known)] if known else float("inf")
