"""A run's wall clock: the time a head's processes took that its printed rates do not account
for, per pair. One piece of arithmetic for the harness, which measures a run on while its wall
clock cannot yet rule its unwitnessed cells in (engine/measure/speed.py), and the bot, which
judges the same pairs (evalbot/grading/unexplained_cost.py), so the two cannot disagree.

Per kept pair i, u_i = (head wall - head's printed work) - (base wall - base's printed work),
the printed work being the sum over the run's cells of tokens / printed rate. Where the rule
times every covered cell (`witness_every_cell`), a printed slowdown buys no cover: each cell's
mean printed slowdown over the pairs (head's printed seconds above main's) is taken off the
head's work, so time a head says it spent on one cell cannot hide real time on another (an
"offset", docs/statistics.md section 9d), nor can a regression printed larger than it is (a
cell printed x0.95 of a rate really 2% slower). The shift is a constant per cell: u keeps its
per-pair noise cancellation, so the run's cost floor stays what it measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .witness import claimed_saving
from .witness_interval import Critical, Floor, Interval, saving_interval

MIN_OWN_PAIRS = 3  # without a floor, fewer pairs than this judge nothing


def pair_costs(witness: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]],
               no_cover: bool = False) -> np.ndarray:
    """u_i per kept pair of a samples witness (`cells`: key -> tokens, `samples`: wall times);
    `no_cover`: printed slowdowns buy no cover."""
    work: dict[tuple[int, str], float] = {}
    for key, tokens in witness["cells"].items():
        record = records.get(key)
        if record is None or not record.get("higher_is_better", True):
            continue  # a latency cell prints seconds, not a rate: no work to account for
        seconds = {(s["pair"], s["side"]): int(tokens) / float(s["value"])
                   for s in record["samples"] if not s["dropped"] and s["value"] > 0}
        shift = _printed_slowdown(seconds) if no_cover else 0.0
        for (pair, side), sec in seconds.items():
            work[(pair, side)] = work.get((pair, side), 0.0) + sec - (shift if side == "head"
                                                                       else 0.0)
    unaccounted: dict[int, dict[str, float]] = {}
    for s in witness["samples"]:
        if not s["dropped"] and (s["pair"], s["side"]) in work:
            unaccounted.setdefault(s["pair"], {})[s["side"]] = \
                float(s["seconds"]) - work[(s["pair"], s["side"])]
    return np.array([p["head"] - p["base"] for _, p in sorted(unaccounted.items())
                     if set(p) == {"base", "head"}])


def _printed_slowdown(seconds: Mapping[tuple[int, str], float]) -> float:
    """The head's mean printed seconds above main's over the pairs both sides printed; 0 where
    it printed itself no slower."""
    pairs = {p for p, side in seconds if side == "base"} & {p for p, side in seconds
                                                             if side == "head"}
    if not pairs:
        return 0.0
    return max(0.0, float(np.mean([seconds[p, "head"] - seconds[p, "base"] for p in pairs])))


def judges(n: int, floor: Floor) -> bool:
    """Do `n` pairs judge a cost at all? Two do with a calibrated floor, three without."""
    return n >= 2 and (n >= MIN_OWN_PAIRS or floor.given)


def cost_interval(u: np.ndarray, crit: Critical, floor: Floor) -> Interval:
    """The interval on the mean cost per pair (seconds): the saving interval of -u, turned."""
    saving = saving_interval(-u, 0.0, crit, floor)
    return Interval(-saving.mean, -saving.hi, -saving.lo, saving.sd)


def rules_in(cost_hi_s: float, record: Mapping[str, Any], tokens: int, margin: float) -> bool:
    """Does a run's wall clock rule out a slowdown of `margin` of this cell's work? The cost's
    upper bound at the equivalence level is below that share of main's seconds for it."""
    claimed = claimed_saving(record["samples"], tokens, record.get("higher_is_better", True))
    return claimed is not None and cost_hi_s < margin * claimed[1]


def unruled(witness: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]],
            judge: Sequence[str], crit: Critical, floor: Floor, margin: float) -> list[str]:
    """The cells of `judge` the run's wall clock does not rule in on its pairs so far (the
    harness's question: measure on?)."""
    u = pair_costs(witness, records, True)
    if not judges(len(u), floor):
        return list(judge)
    hi = cost_interval(u, crit, floor).hi
    return [k for k in judge if not rules_in(hi, records[k], int(witness["cells"][k]), margin)]
