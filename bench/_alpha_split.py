"""How the equivalence alpha is split over a witness's looks, per witness (bench/hidden_cost.py
`--splits`): the sized last look each split needs, an honest A/A's expected pairs and box time,
and the chance that a head slowed by t is ruled in (the construction: at most 5%).

Splits (each look's share of EQUIVALENCE_ALPHA, evalbot/grading/confirmation.py):
  n^2        rule 2: in proportion to the square of each look's pairs
  sized-last rule 3 (BOTH_WAYS_RULE): as n^2, but the sized last look weighs what the look at
             BOTH_WAYS_LAST_LOOK x the one before it did: the early looks keep their shares
  even       Pocock-like: every look the same share (rule 3's equivalence split)
Per witness, each split's last look is sized as evalbot/grading/witness_sizing.py sizes it (its
own test at the floor the job carries), then 20,000 drawn witnesses (pairs of sd the simulated
box's) are judged at every look by the harness's own function (witness_interval.rules_out),
stopping at the first look that rules the slowdown out. Other covered cells' claims and futility
stops are left out (the full simulation, `--sims`, has them). Box time: expected pairs x 2
processes x the process's wall time (bench/_paces.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from evalbot.engine.contract.shared.stats import pooled_sd
from evalbot.engine.contract.shared.witness_interval import Critical, Floor
from evalbot.grading.confirmation import (
    BOTH_WAYS_LAST_LOOK,
    BOTH_WAYS_RULE,
    critical,
    equivalence_alphas,
    look_alphas,
)
from evalbot.grading.sequential import EQUIVALENCE_ALPHA
from evalbot.grading.witness_sizing import FALSE_FLAGS_PER_PR, MAX_LAST_LOOK, miss_at

Split = Callable[[tuple[int, ...]], list[float]]
SPLITS: dict[str, Split] = {
    "n^2": lambda looks: equivalence_alphas(looks, 2),
    "sized-last": lambda looks: look_alphas(looks, EQUIVALENCE_ALPHA, BOTH_WAYS_RULE),
    "even": lambda looks: equivalence_alphas(looks, BOTH_WAYS_RULE),
}
DRAWS = 20_000


def sized(profile_looks: tuple[int, ...], split: Split, floor: Floor, delta_s: float,
          checks: int) -> int:
    """The last look `split` needs: witness_sizing.last_look with that split's alpha."""
    least = BOTH_WAYS_LAST_LOOK * profile_looks[-1]
    if not (floor.given and delta_s > 0):
        return least
    for n in range(least, MAX_LAST_LOOK + 1):
        looks = (*profile_looks, n)
        if miss_at(n, split(looks)[-1], floor, delta_s, 2) <= FALSE_FLAGS_PER_PR / checks:
            return n
    return MAX_LAST_LOOK


def drawn(looks: tuple[int, ...], split: Split, floor: Floor, delta_s: float, sd_s: float,
          shift_s: float, seed: int) -> tuple[float, float]:
    """(expected pairs, share ruled in) of DRAWS witnesses whose pairs' mean saving is `shift_s`
    (0: an A/A), judged at each look as the harness stops (rules_out)."""
    rng = np.random.default_rng(seed)
    d = rng.normal(shift_s, sd_s, size=(DRAWS, looks[-1]))
    alphas = split(looks)
    stopped = np.full(DRAWS, looks[-1], float)
    ruled = np.zeros(DRAWS, bool)
    for n, a in zip(looks, alphas, strict=True):
        crit = critical(n, a, a, floor.df, 2)
        lo = _lower(d[:, :n], crit, floor)
        now = ~ruled & (lo > -delta_s)
        stopped[now] = n
        ruled |= now
    return float(stopped.mean()), float(ruled.mean())


def _lower(d: np.ndarray, crit: Critical, floor: Floor) -> np.ndarray:
    """witness_interval.saving_interval's lower bound over rows, with its pooling (stats.pooled_sd;
    MIN_RELATIVE_SD's floor is far below these sds and left out)."""
    n = d.shape[1]
    own = d.std(axis=1, ddof=1)
    sd, t = own, np.full(len(d), crit.lower)
    if floor.given and crit.guard > 0 and crit.lower_pooled > 0:
        sd, alone = pooled_sd(own, floor.sd_s, n - 1, crit.floor_df or floor.df, crit.guard)
        t = np.where(alone, crit.lower, crit.lower_pooled)
    return d.mean(axis=1) - t * sd / np.sqrt(n)


def print_splits(evaluator: object, checks: int) -> None:
    """Per witness of the evaluator's job (its floors, its box's noise) and split: the sized last
    look, an A/A's expected pairs and box seconds, a head slowed by t ruled in (<= 5%)."""
    job, world = evaluator.job, evaluator.world  # type: ignore[attr-defined]
    t = job.rule.margin
    print("\n| witness | split | looks | A/A pairs | A/A box s | slowed by t: ruled in |\n"
          "|---|---|---|---:|---:|---:|")
    totals = dict.fromkeys(SPLITS, 0.0)
    for run in job.runs:
        for i, spec in enumerate(run.witnesses):
            pace, floor = world.witness(run, spec), Floor(spec.sd_floor_s, spec.floor_df)
            delta, profile_looks = t * spec.work_s, spec.looks[:-1]
            for j, (name, split) in enumerate(SPLITS.items()):
                looks = (*profile_looks, sized(profile_looks, split, floor, delta, checks))
                pairs, _ = drawn(looks, split, floor, delta, pace.pair_sd_s, 0.0, 7 * i + j)
                _, slowed = drawn(looks, split, floor, delta, pace.pair_sd_s,
                                  -spec.work_s * t / (1 - t), 7 * i + j + 1)
                box_s = pairs * 2 * pace.wall_s
                totals[name] += box_s
                print(f"| {spec.name} | {name} | {','.join(map(str, looks))} | {pairs:.1f} | "
                      f"{box_s:.0f} | {100 * slowed:.1f}% |", flush=True)
    print("\nan A/A's witnesses, box s: " + ", ".join(f"{k} {v:.0f}" for k, v in totals.items()))
