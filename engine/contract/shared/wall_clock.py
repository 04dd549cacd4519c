"""A run's wall clock: the time a head's processes took that its printed rates do not account
for, per pair. One piece of arithmetic for the harness, which measures a run on while its wall
clock cannot yet rule its unwitnessed cells in (engine/measure/speed.py), and the bot, which
judges the same pairs (evalbot/grading/unexplained_cost.py), so the two cannot disagree.

Per kept pair i, u_i = (head wall - head's printed work) - (base wall - base's printed work),
the printed work being the sum over the run's cells of tokens / printed rate. Where the rule
times every covered cell (`witness_every_cell`), a printed slowdown buys no cover in the bound
that rules a cell in: a cell the head printed slower on the mean of the pairs counts on the
head's side, pair by pair, as main printed it, so time a head says it spent on one cell cannot
hide real time on another (an "offset", docs/statistics.md section 9e), nor can a regression
printed larger than it is. Such a cell's own noise then stays in u (its printed time no longer
cancels its real time), so the run's floor is widened by that cell's calibrated noise: the
rule's per-pair sd of its log-ratio times main's seconds for its work.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from .witness_interval import Critical, Floor, Interval, claimed_saving, saving_interval

MIN_OWN_PAIRS = 3  # without a floor, fewer pairs than this judge nothing


def pair_costs(witness: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]],
               uncover: Collection[str] = ()) -> np.ndarray:
    """u_i per kept pair of a samples witness (`cells`: key -> tokens, `samples`: wall times);
    a cell in `uncover` counts on the head's side as the pair's base printed it."""
    work: dict[tuple[int, str], float] = {}
    for key, tokens in witness["cells"].items():
        seconds = _printed_seconds(records.get(key), int(tokens))
        for (pair, side), sec in seconds.items():
            if key in uncover and side == "head":
                sec = seconds.get((pair, "base"), sec)
            work[(pair, side)] = work.get((pair, side), 0.0) + sec
    unaccounted: dict[int, dict[str, float]] = {}
    for s in witness["samples"]:
        if not s["dropped"] and (s["pair"], s["side"]) in work:
            unaccounted.setdefault(s["pair"], {})[s["side"]] = \
                float(s["seconds"]) - work[(s["pair"], s["side"])]
    return np.array([p["head"] - p["base"] for _, p in sorted(unaccounted.items())
                     if set(p) == {"base", "head"}])


def _printed_seconds(record: Mapping[str, Any] | None, tokens: int) -> dict[tuple[int, str], float]:
    """(pair, side) -> the seconds its printed rate accounts for; none for a latency cell,
    which prints seconds, not a rate: no work to account for."""
    if record is None or not record.get("higher_is_better", True):
        return {}
    return {(s["pair"], s["side"]): tokens / float(s["value"])
            for s in record["samples"] if not s["dropped"] and s["value"] > 0}


def printed_slower(witness: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]]
                   ) -> list[str]:
    """The run's cells whose head printed more seconds than main's on the mean of the pairs."""
    out = []
    for key, tokens in witness["cells"].items():
        seconds = _printed_seconds(records.get(key), int(tokens))
        diffs = [seconds[p, "head"] - seconds[p, "base"] for p, side in seconds
                 if side == "base" and (p, "head") in seconds]
        if diffs and float(np.mean(diffs)) > 0:
            out.append(key)
    return out


def uncovered(witness: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]],
              floor: Floor, cell_floors: Mapping[str, float]) -> tuple[np.ndarray, Floor]:
    """u with printed slowdowns buying no cover, and the run's floor widened by the noise of
    the cells that no longer cancel (`cell_floors`: key -> per-pair sd of its log-ratio)."""
    slower = printed_slower(witness, records)
    extra = [cell_floors.get(k, 0.0) * main_s for k in slower
             if (main_s := _main_s(records[k], int(witness["cells"][k]))) is not None]
    widened = Floor(math.hypot(floor.sd_s, *extra), floor.df) if floor.given else floor
    return pair_costs(witness, records, slower), widened


def _main_s(record: Mapping[str, Any], tokens: int) -> float | None:
    claimed = claimed_saving(record["samples"], tokens, record.get("higher_is_better", True))
    return None if claimed is None else claimed[1]


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
    main_s = _main_s(record, tokens)
    return main_s is not None and cost_hi_s < margin * main_s


def measure_on(witness: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]],
               judge: Sequence[str], crit: Critical, floor: Floor, margin: float,
               cell_floors: Mapping[str, float]) -> bool:
    """The harness's question: measure on? Yes while the run's wall clock does not rule a cell
    of `judge` in on its pairs so far, unless one of those cells is already past its margin on
    the mean cost: more pairs narrow the bound toward the mean, so that cell would most likely
    stay unruled, the headline eval:inconclusive whatever the other cells' pairs say, and the
    pairs would buy box time. An honest head printed slower within the tolerance is such a case
    (its printed slowdown, uncovered, is real time), and so is an offset hiding more than the
    margin. Stopping leaves a cell not believed, never believes one."""
    u, widened = uncovered(witness, records, floor, cell_floors)
    if not judges(len(u), widened):
        return bool(judge)
    hi, mean = cost_interval(u, crit, widened).hi, float(u.mean())
    unruled = [k for k in judge if not rules_in(hi, records[k], int(witness["cells"][k]), margin)]
    return bool(unruled) and all(
        rules_in(mean, records[k], int(witness["cells"][k]), margin) for k in unruled)
