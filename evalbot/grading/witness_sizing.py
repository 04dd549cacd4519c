"""How many pairs a witness's last look needs where it must rule a slowdown out (issue 53). Pure.

Where the rule times every covered cell (`speed.witness_every_cell`), an unchanged cell is believed
only where its witness's equivalence bound rules out a slowdown of the rule's witness margin t of
the cell's work (the regression threshold, or the profile's finer `witness_margin`: sparkinfer's
is the policy's smallest tier step), delta = t x `work_s` (evalbot/grading/confirmation.py
`both_ways`). An honest
A/A misses that at its last look with a chance set by the box's noise: at sparkinfer's H200
floors a last look of 16 pairs missed it about once in 10^8 witnesses, at the H100's noise (4-5
times those floors) about once in 1,000 (docs/statistics.md section 9). So the last look is sized
from the floor the job carries (the box's calibrated one, `evalbot calibrate`, else the
profile's): the fewest pairs at which an A/A whose pair sd is that floor misses it with a chance
of at most FALSE_FLAGS_PER_PR over the cells the job's witnesses rule in, and never fewer than the rule's
BOTH_WAYS_LAST_LOOK times the profile's last look.

The miss chance is that of the look's own test, not a normal approximation: the mean of n pairs
is N(0, f^2 / n); the sd the bound uses is the pairs' own S ((n - 1) S^2 / f^2 ~ chi^2 at n - 1
df) pooled with the floor where the F guard lets it (rule 2: at the test's median, the floor
counted for at most n - 1 df), else S alone, each with its own critical value; the chance is
integrated over S. The other covered cells' claims the bound subtracts are left out (a witness
with one cell to rule in has none).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from evalbot.engine.contract.shared.witness_interval import Floor
from evalbot.grading.confirmation import BOTH_WAYS_LAST_LOOK, critical, equivalence_alpha_at

MAX_SHARE = 10.0  # the job contract's bound on `witness_share` (engine/contract/rule.py)
MAX_ROOM_SCALE = 4.0  # a profile without max_budget_s: the room grows at most this many times
FALSE_FLAGS_PER_PR = 0.001  # an honest A/A not believed, at most, per PR (issue 53)
MAX_LAST_LOOK = 64  # beyond it a witness's box time is out of any PR's proportion: the look stays
_GRID = 4000  # points of the chi-square integral


def last_look(looks: tuple[int, ...], floor: Floor, delta_s: float, checks: int,
              version: int, cap: int = MAX_LAST_LOOK) -> int:
    """The last look a witness of these `looks` gets where it must rule out `delta_s` (seconds a
    pair): BOTH_WAYS_LAST_LOOK x its last, or more where an A/A at `floor` would miss it there
    with a chance above FALSE_FLAGS_PER_PR / `checks` (the cells the job's witnesses rule in);
    at most `cap`, MAX_LAST_LOOK in a job (the room then
    decides what it gets: a cell it cannot rule in is not believed, never unchanged). Without a
    floor or a delta, nothing to size from: the rule's multiple."""
    least = BOTH_WAYS_LAST_LOOK * looks[-1]
    if not (floor.given and delta_s > 0):
        return least
    target = FALSE_FLAGS_PER_PR / max(checks, 1)
    for n in range(least, cap + 1):
        if miss(n, (*looks, n), floor, delta_s, version) <= target:
            return n
    return max(cap, least)


def miss(pairs: int, looks: tuple[int, ...], floor: Floor, delta_s: float, version: int,
         sd_s: float = 0.0) -> float:
    """The chance that an A/A whose pair sd is `sd_s` (0: the floor) does not rule out `delta_s`
    at its look of `pairs` pairs (one of `looks`, the witness's schedule), as the bot judges
    that look with the floor the job carried."""
    return miss_at(pairs, equivalence_alpha_at(looks, pairs, version), floor, delta_s, version,
                   sd_s)


def miss_at(pairs: int, alpha: float, floor: Floor, delta_s: float, version: int,
            sd_s: float = 0.0) -> float:
    """`miss` at a look judged at one-sided `alpha` (its share of the equivalence alpha)."""
    return _miss(pairs, alpha, floor.sd_s, floor.df, delta_s, version, sd_s or floor.sd_s)


@lru_cache(maxsize=4096)
def _miss(pairs: int, a: float, floor: float, df: int, delta: float,
          version: int, sd: float) -> float:
    crit = critical(pairs, a, a, df, version)
    k = pairs - 1
    x = np.linspace(0.0, k + 14.0 * math.sqrt(2.0 * k) + 40.0, _GRID)[1:]
    log_density = (k / 2 - 1) * np.log(x) - x / 2 - (k / 2) * math.log(2) - math.lgamma(k / 2)
    weight = np.exp(log_density) * (x[1] - x[0])
    own = sd * np.sqrt(x / k)  # the pairs' own S, (k S^2 / sd^2 ~ chi^2 at k df)
    counted = min(df, k) if version >= 2 else df
    pooled = np.sqrt((counted * floor * floor + k * own * own) / (counted + k))
    refuted = own * own > crit.guard * floor * floor if crit.guard > 0 and crit.lower_pooled > 0 \
        else np.ones_like(own, bool)
    bound = np.where(refuted, crit.lower * own, crit.lower_pooled * pooled)  # c x the sd used
    z = (bound - delta * math.sqrt(pairs)) / sd  # the mean's z below which the bound misses
    phi = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
    return float(min(max(np.sum(weight * phi), 0.0), 1.0))


def room_share(share: float, lasts: list[tuple[int, int]], budget_s: float,
               max_budget_s: float | None) -> float:
    """The witnesses' share of the measuring's budget where their last looks were sized: the
    profile's `share` bought each witness's pairs up to BOTH_WAYS_LAST_LOOK x its profile's last
    look; `lasts` holds (that look, the sized one) per sized witness, and the share grows as the
    most any witness's last look grew, so every witness can reach its sized look where the
    profile's could reach theirs (the budget is counted in pairs as well: StoppingRule.total_budget_s). At the
    profile's floors nothing grows: the share is the profile's. A hard cap: the room at the
    profile's pace never above the profile's `max_budget_s` (else MAX_ROOM_SCALE x the share),
    nor the contract's MAX_SHARE; a witness it cuts leaves its cell not believed, never
    unchanged."""
    grown = max([sized / unsized for unsized, sized in lasts if unsized > 0], default=1.0)
    cap = max_budget_s / budget_s if max_budget_s and budget_s > 0 else MAX_ROOM_SCALE * share
    return round(min(share * max(grown, 1.0), max(cap, share), MAX_SHARE), 3)
