"""The fixed-n minimum at an effect (bench/verdict_quality.py): the fewest pairs of a single look,
with the sd known, that reach the sequential rule's own power and tier accuracy at that effect.

One look at n pairs: the estimate m ~ N(mu, sd / sqrt(n)) (mu = ln(1 + effect)); improved when
m >= max(ln(1 + s), z sd / sqrt(n)) with z the Bonferroni normal quantile of alpha over the
family (one look: no split over looks); the right tier when m also lies in the true tier (the
lowest tier starts at the significance threshold, the top one has no end). Its A/A false rate
is at most alpha by construction, so only power and tier accuracy bind; each is asked up to
CEILING (a simulated 100% is not a promise of 100%).
"""

from __future__ import annotations

import math

from scipy import stats as sps

from evalbot.grading.policy import TIER_ORDER, Policy

CEILING = 0.99
POWER_TARGET, TIER_TARGET = 0.95, 0.90  # issue 33's bars


def tier_range(effect: float, policy: Policy, significance: float) -> tuple[float, float]:
    """The log-ratio range of the tier a true decode `effect` earns."""
    gains = [policy.tiers[t] for t in reversed(TIER_ORDER)]  # ascending: XS ... XL
    below = [g for g in gains if g <= effect]
    above = [g for g in gains if g > effect]
    lo = math.log1p(max(below[-1] if below else gains[0], significance))
    return lo, math.log1p(above[0]) if above else math.inf


def fixed_n(effect: float, sd: float, family: int, policy: Policy, significance: float,
            power: float, right: float, cap: int = 400) -> int:
    """Fewest pairs of one look whose P(improved) >= power and P(improved at the true tier) >=
    right (the sequential rule's own figures at this effect)."""
    mu, up = math.log1p(effect), math.log1p(significance)
    z = sps.norm.isf(policy.alpha / (2 * family))
    lo, hi = tier_range(effect, policy, significance)
    for n in range(2, cap):
        se = sd / math.sqrt(n)
        bar = max(up, z * se)
        p_improved = sps.norm.sf((bar - mu) / se)
        p_right = sps.norm.cdf((hi - mu) / se) - sps.norm.cdf((max(lo, bar) - mu) / se)
        if p_improved >= power and p_right >= right:
            return n
    return cap
