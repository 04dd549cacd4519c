"""Main's drift against the floors, look by look: the harness scores on while it is undecided
(engine/scoring/correctness.py), the grader replays it (evalbot/grading/correctness_policy.py).

Main's top-1 and KL against the reference are measured per scored window, each window counted
once (the pieces of a long window share its text and its cache). At look j, with the bot's rule
(`drift`: the floors, one-sided t quantiles per look, the drift to catch):
  drift      main's upper bound on top-1 is below the floor, or its lower bound on KL above the
             ceiling (`critical`): the reference or main is unusable, an infra-error;
  clear      main's lower bound on top-1 is above the floor less `top1_margin` and its upper
             bound on KL below the ceiling plus `kl_margin` (`clear`): main is not the drift the
             rule must catch;
  undecided  neither: score the next look's windows too, whatever the head's verdict;
at the last look an undecided main is drifted when its estimate lies beyond the floor.
A main at its calibrated level clears at the first look; one a few points under its floor is
scored on until it is told (bench/guard_quality.py: the smallest drift caught in 95% of PRs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .correctness_stats import interval
from .segments import window_key

STATUSES = ("drift", "clear", "undecided")


def main_level(chunks: Sequence[dict[str, Any]], critical: float) -> dict[str, Any]:
    """Main's top-1 and KL against the reference with bounds of `critical` standard errors,
    over the scored windows, each counted once."""
    merged: dict[tuple[str, int], list[float]] = {}
    for c in chunks:
        row = merged.setdefault(window_key(c), [0.0] * 3)
        for k, key in enumerate(("positions", "base_top1", "base_kl_sum")):
            row[k] += float(c.get(key, 0.0))
    n, top, kl = (np.array(col) for col in zip(*merged.values(), strict=True))
    top, kl, ones = top / n, kl / n, np.ones(len(n))
    return {"top1": interval(top, top**2, ones, critical),
            "kl": interval(kl, kl**2, ones, critical), "windows": len(n)}


def status(chunks: Sequence[dict[str, Any]], rule: Mapping[str, Any], j: int) -> str:
    """Look j of main's drift test over `chunks` (the first j + 1 looks' windows)."""
    top1, kl = float(rule["top1"]), float(rule["kl"])
    seen = main_level(chunks, float(rule["critical"][j]))
    if seen["top1"]["hi"] < top1 or seen["kl"]["lo"] > kl:
        return "drift"
    near = main_level(chunks, float(rule["clear"][j]))
    if near["top1"]["lo"] >= top1 - rule["top1_margin"] and \
            near["kl"]["hi"] <= kl + rule["kl_margin"]:
        return "clear"
    if j < len(rule["critical"]) - 1:
        return "undecided"
    return "drift" if seen["top1"]["mean"] < top1 or seen["kl"]["mean"] > kl else "clear"
