"""Per-look critical values for the on-box stopping rule (bot side: scipy lives here, not on the box).

Two kinds of error, two levels (docs/statistics.md):
- A false *verdict* (improved, regressed or slower without a real change) is controlled per PR:
  alpha is split by Bonferroni over every cell of the family (guards included) and every look,
  two-sided.
- Calling a cell *neutral* is an equivalence statement (TOST): its error is missing a material
  change, which the simulator's power figures measure; it uses a per-cell, per-look level.
Each level gives a Student t quantile with n_k - 1 degrees of freedom (multiplies the cell's own
sd) and one with pool_df + n_k - 1 (multiplies the sd pooled with the calibration's, which has
pool_df degrees of freedom). Without pool_df (the first rule) the second is a normal quantile
that multiplies the calibrated floor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalbot.engine.contract.shared.faults import FAULT_SIGMAS
from evalbot.engine.contract.shared.stats import Bounds
from evalbot.grading import quantiles

EQUIVALENCE_ALPHA = 0.05  # one-sided level of each TOST half, per cell and look
SETTLE_LEVEL = 0.90  # two-sided level of the tier interval that must lie inside one tier
GUARD_ALPHA = 0.01  # an F test at this level says the box is noisier than its calibration
MAX_ALPHA = 0.1  # a per-PR false-verdict level above this is no error control
# Rule versions (a results' `rule_version`; none: 1). Version 2 (issue 33), pooled rules only:
# - no improved, regressed or slower verdict at a look of fewer than VERDICT_PAIRS pairs (but the
#   last look): a fault of whole processes lines up in all n pairs with probability 2 (2/9)^n for
#   a slow first test in a third of them (sparkinfer's A/A: 20% false at 2 pairs); at such a
#   look the directional values are negative (engine/contract/shared/stats.py);
# - the tier settles when its 90% interval lies inside the estimate's own tier (negative settle
#   values), not within half the narrowest neighbouring tier (2.2-2.6x the fixed-n pairs).
# Version 3 (issue 46): version 2's values, and the fault screen (engine/contract/shared/faults.py): a pair
# with a sample far slower than its side's fastest is dropped and measured again (`fault_sigmas`).
RULE_VERSION = 3
VERDICT_PAIRS = 5
DIGITS = 6  # critical values travel in JSON: round so the replay compares equal numbers


def schedule(looks: Sequence[int], family: int, alpha: float,
             equivalence_alpha: float = EQUIVALENCE_ALPHA, pool_df: int = 0,
             version: int = 1) -> list[Bounds]:
    """The critical values of every look for a family of `family` cells, under rule `version`
    (1: results before issue 33; RULE_VERSION for new jobs)."""
    if version not in (1, 2, 3):
        raise ValueError(f"rule version {version} is unknown")
    if family < 1 or not looks:
        raise ValueError("need at least one cell and one look")
    if any(n < 2 for n in looks):
        raise ValueError(f"looks {list(looks)}: each look needs at least 2 pairs")
    if list(looks) != sorted(set(looks)):
        raise ValueError(f"looks {list(looks)} are not increasing pair counts")
    if not (0 < alpha <= MAX_ALPHA and 0 < equivalence_alpha < 0.5):
        raise ValueError(f"alpha {alpha} (at most {MAX_ALPHA}) / equivalence alpha "
                         f"{equivalence_alpha} out of range")
    if pool_df < 0:
        raise ValueError(f"pool_df {pool_df} is negative")
    tail = alpha / (2 * family * len(looks))  # one tail of a two-sided Bonferroni test
    settle = (1 - SETTLE_LEVEL) / 2
    out = []
    for n in looks:
        pooled = pool_df + n - 1
        # version 2: the signs select the tests (module comment above)
        barred = -1 if version >= 2 and pool_df and n < VERDICT_PAIRS and n != looks[-1] else 1
        inside = -1 if version >= 2 and pool_df else 1
        if pool_df:
            floors = (quantiles.t_isf(tail, pooled), quantiles.t_isf(equivalence_alpha, pooled),
                      quantiles.t_isf(settle, pooled))
        else:
            floors = (quantiles.norm_isf(tail), quantiles.norm_isf(equivalence_alpha), 0.0)
        out.append(Bounds(
            pairs=n, directional=barred * _r(quantiles.t_isf(tail, n - 1)),
            directional_floor=barred * _r(floors[0]),
            equivalence=_r(quantiles.t_isf(equivalence_alpha, n - 1)),
            equivalence_floor=_r(floors[1]),
            settle=inside * _r(quantiles.t_isf(settle, n - 1)) if pool_df else 0.0,
            settle_floor=inside * _r(floors[2]),
            guard=guard(n, pool_df) if pool_df else 0.0,
            pool_df=int(pool_df)))
    return out


def fault_sigmas(version: int, pool_df: int) -> float:
    """The fault screen's spreads a rule of `version` carries: the pooled rules of version 3 on;
    0 (no screen) for the first rule and for results written before it."""
    return FAULT_SIGMAS if version >= 3 and pool_df else 0.0


def guard(pairs: int, pool_df: int, alpha: float = GUARD_ALPHA) -> float:
    """The F quantile above which a sample's S^2 / f^2 refutes a calibrated floor f of pool_df
    degrees of freedom: at GUARD_ALPHA for the speed cells (and witnesses of rule 1), at the
    median for witnesses of rule 2 (evalbot/grading/confirmation.py)."""
    return _r(quantiles.f_isf(alpha, pairs - 1, pool_df))


def rule_lists(bounds: Sequence[Bounds], version: int = 1) -> dict[str, Any]:
    """A schedule as the rule's per-look lists (the job's and the results' `rule` keys)."""
    pool_df = bounds[0].pool_df if bounds else 0
    out: dict[str, Any] = {
        "rule_version": version,
        "critical": [b.directional for b in bounds],
        "critical_floor": [b.directional_floor for b in bounds],
        "equivalence": [b.equivalence for b in bounds],
        "equivalence_floor": [b.equivalence_floor for b in bounds],
        "pool_df": pool_df,
    }
    for key, attr in (("settle", "settle"), ("settle_floor", "settle_floor"), ("guard", "guard")):
        out[key] = [getattr(b, attr) for b in bounds] if pool_df else []
    return out


def critical_values(looks: Sequence[int], family: int, alpha: float) -> list[float]:
    """The directional t quantile per look (the rule's `critical` list)."""
    return [b.directional for b in schedule(looks, family, alpha)]


def _r(x: float) -> float:
    return round(float(x), DIGITS)
