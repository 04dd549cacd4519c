"""Did the head spend time its printed rates do not account for? Pure; table-tested.

The other direction of engine/measure/spoof.py (issue 53). Per run's samples witness and per kept
pair i, the harness measured each process's wall time and the head's bench printed its rates; a
process's unaccounted time is its wall time less the work its rates account for (sum over the
run's cells of tokens / rate: load, untimed fills, start-up). Base and head of a pair share all of
that, so the difference of the two sides' unaccounted times, u_i, scatters about 0 for any head
whose printed rates are true, faster or slower. A head whose processes really take longer while
its bench prints main-like rates (scaled, x0.95) leaves the extra time in u.

  cost    the lower bound of mean(u) at one-sided 1 - COST_ALPHA / runs is above 0: every cell
          of that run the rates did not already call regressed, and no harness-owned witness
          confirmed (it timed that cell's own work), is not believed (`unconfirmed`,
          confirmation COST): no tier, no "unchanged", the headline no better than
          eval:inconclusive (grade.py). Never a REJECT: the time is real, but where it went (a
          cell, the load) is the head's word.

The sd is u's own, pooled with the run's calibrated floor where the profile gives one (a run that
decides at 2 pairs has one degree of freedom of its own), unless the pairs refute it (the speed
cells' F guard): engine/contract/shared/witness_interval.py's interval, so the two clocks' checks share
one piece of arithmetic. Bonferroni over the runs keeps an honest PR's false flags at COST_ALPHA
whatever its runs (bench/spoof_quality.py `hidden`, docs/statistics.md "One clock").

  no cover   where the rule times every covered cell, a printed slowdown buys no cover in the
          bound that rules a cell in (not in the flag above, which must stay a test at
          COST_ALPHA): a cell printed slower counts at main's printed time on the head's side,
          the run's floor widened by its noise (an honest slower head is then not believed, as
          its witnessed cells are, docs/statistics.md section 9c), or
          time a head says it spent on one cell would cover a slowdown hidden in another (an
          "offset", section 9e), a regressed cell's included: a regression printed larger than
          it is would cover one hidden elsewhere (the REJECT is the verdict's either way). The
          arithmetic is engine/contract/shared/wall_clock.py's, which the harness also applies to
          measure a run on while its wall clock cannot rule its unwitnessed cells in.
  both ways  where the rule times every covered cell (`witness_every_cell`), a cell no witness
          of the harness times is its run's wall clock's to believe: unchanged only where the
          upper bound of mean(u), at the printed-rate rule's equivalence level, lies below the
          witness margin's share of main's seconds for that cell's work (as a witness rules
          its cells in, confirmation.py `both_ways`); else not believed, NOT_RULED_OUT. Pairs
          that refute the floor (a noisy head, or one that adds noise) widen that bound
          rather than silence the check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from evalbot.engine.contract.shared import wall_clock
from evalbot.engine.contract.shared.replay import cell_floor, cell_key
from evalbot.engine.contract.shared.witness_interval import Critical, Floor
from evalbot.grading import quantiles
from evalbot.grading.sequential import EQUIVALENCE_ALPHA, GUARD_ALPHA, guard

COST_ALPHA = 0.001  # an honest PR's chance of a flag, all its runs together
COST = "time unaccounted for"  # a cell's confirmation when its run's cost is flagged
COST_REASON = ("the harness's clock shows time the engine's printed rates do not account for; "
               "not believed")
# a cell the rule has its witness time both ways (`witness_every_cell`) but that no witness timed
# to a judgement (its head output failed, too few pairs, a stale floor): not believed either
UNTIMED = "not timed by the harness"
UNTIMED_REASON = "the harness's witness could not time this cell; not believed"
# ... or that its witness timed without ruling out, at the printed-rate rule's equivalence level
# (evalbot/grading/confirmation.py `both_ways`), a slowdown of the rule's witness margin
NOT_RULED_OUT = "slowdown not ruled out"
CAPPED = (COST, UNTIMED, NOT_RULED_OUT)  # confirmations that hold the headline at inconclusive


def witness_margin(rule: Mapping[str, Any]) -> float:
    """The slowdown, as a share of a cell's work, a witness must rule out for a cell printed
    unchanged to be believed, as the results' rule recorded it: its `witness_margin` (the
    profile's, e.g. the policy's smallest tier step), else the regression threshold (jobs before
    it); 0 where the rule does not time every covered cell (nothing is asked)."""
    if not rule.get("witness_every_cell"):
        return 0.0
    return float(rule.get("witness_margin") or rule.get("tolerance") or 0.0)


def not_ruled_out_reason(rule: Mapping[str, Any]) -> str:
    """Why an unchanged cell its witness timed is not believed (the comment's reason)."""
    margin, tolerance = witness_margin(rule), float(rule.get("tolerance") or 0.0)
    what = "the regression threshold" if margin >= tolerance else \
        f"the witness margin, below the {100 * tolerance:g}% regression threshold"
    return (f"the harness's clock could not rule out a slowdown of {100 * margin:g}% ({what}) "
            "of this cell's work; not believed")


def harness_covered(results: Mapping[str, Any]) -> set[str]:
    """The cells some harness-owned witness of the results times (not the run's samples)."""
    return {k for w in results.get("witnesses") or [] if w.get("source", "witness") == "witness"
            for k in w["cells"]}


def judge_cost(u: np.ndarray, floor: Floor, alpha: float,
               uncovered: tuple[np.ndarray, Floor] | None = None) -> dict[str, Any] | None:
    """The cost interval's figures, whether it is flagged, and the upper bound of the cost at
    the equivalence level (what the wall clock rules out); None when the pairs judge nothing.
    `uncovered`: u with printed slowdowns buying no cover and its widened floor
    (engine/contract/shared/wall_clock.py), for the bound only: a flag on it would be no test at
    COST_ALPHA (a printed slowdown is noise as often as not); else u itself."""
    n = len(u)
    if not wall_clock.judges(n, floor):
        return None
    bounds = wall_clock.cost_interval(u, _critical(n, floor, alpha), floor)
    u_bound, floor_bound = uncovered or (u, floor)
    equivalence = wall_clock.cost_interval(u_bound, cost_critical(n, floor_bound), floor_bound)
    return {"pairs": n, "cost_s": bounds.mean, "cost_lo_s": bounds.lo, "sd": bounds.sd,
            "cost_hi_s": equivalence.hi, "flagged": bounds.lo > 0}


def cost_critical(n: int, floor: Floor) -> Critical:
    """The equivalence level's critical values of a run's wall clock at `n` pairs (what the
    harness's stop and the bot's belief in an unwitnessed cell apply)."""
    return _critical(n, floor, EQUIVALENCE_ALPHA)


def _critical(n: int, floor: Floor, alpha: float) -> Critical:
    t_own = quantiles.t_isf(alpha, n - 1)
    if not floor.given:
        return Critical(t_own, t_own)
    t_pooled = quantiles.t_isf(alpha, floor.df + n - 1)
    return Critical(t_own, t_own, t_pooled, t_pooled, guard(n, floor.df, GUARD_ALPHA))


def unexplained_costs(results: Mapping[str, Any]) -> list[dict[str, Any] | None]:
    """Per witness of the results, in their order: a samples witness's cost judgement where its
    pairs judge one, else None. By position, not name: two runs of one model (sparkinfer's
    sweep and its 131072 run) both record `samples:<model>`. Where the rule times every covered
    cell, printed slowdowns buy no cover, and the flag's level is split over the rule's looks as
    well as the runs: a run measures on from a look where its wall clock did not rule its cells
    in (engine/measure/speed.py `_on_to`), which is where its early pairs ran long, so the flag
    is judged on a number of pairs its own data chose (a simulated A/A was flagged at 5 pairs
    after 2 pairs that ran long: docs/statistics.md section 9e)."""
    samples = [w for w in results.get("witnesses") or [] if w.get("source") == "samples"]
    records = {cell_key(c): c for c in results["cells"]}
    no_cover = bool(results["rule"].get("witness_every_cell"))
    alpha = COST_ALPHA / max(len(samples), 1) / (len(results["rule"]["looks"]) if no_cover else 1)
    out: list[dict[str, Any] | None] = []
    for w in results.get("witnesses") or []:
        judged = None
        if w.get("source") == "samples":
            floor = cost_floor(w)
            judged = judge_cost(wall_clock.pair_costs(w, records), floor, alpha,
                                wall_clock.uncovered(w, records, floor, cell_floors(results))
                                if no_cover else None)
        out.append(None if judged is None else {**judged, "cells": sorted(w["cells"])})
    return out


def cell_floors(results: Mapping[str, Any]) -> dict[str, float]:
    """Each cell's per-pair sd of its log-ratio, as its rule gave it."""
    return {cell_key(c): cell_floor(c, results["rule"]) for c in results["cells"]}


def cost_floor(witness: Mapping[str, Any]) -> Floor:
    """A samples witness's calibrated floor (the profile's run `cost_floor`), if it has one."""
    return Floor(float(witness.get("sd_floor_s") or 0.0), int(witness.get("floor_df") or 0))


def apply(results: Mapping[str, Any], cells: list[dict[str, Any]],
          witnesses: list[dict[str, Any]]) -> None:
    """Flagged runs' cells (in place): every cell not already regressed or spoofed is not
    believed, but for one a harness witness timed: confirmed, or (where the rule times every
    covered cell) judged by the one rule on its own clock (confirmation.py `both_ways`); there
    an unchanged cell no witness timed is believed only where its run's wall clock rules it in.
    Each samples witness's judgement joins the verdict's `witnesses` as `cost`."""
    every_cell = bool(results["rule"].get("witness_every_cell"))
    costs = unexplained_costs(results)
    for w, cost in zip(witnesses, costs, strict=True):
        if cost is not None:  # the verdict's cost as before; its bound is the cells' to state
            w["cost"] = {k: v for k, v in cost.items() if k != "cost_hi_s"}
    flagged = {k for c in costs if c is not None and c["flagged"] for k in c["cells"]}
    # Whole-process wall times include the load, which two builds of the same code need not
    # share: a GPU A/A's docs-only head took 0.30 s longer a process in both of its pairs, its
    # printed rates and its witnesses' handoff clocks equal to main's (docs/gpu-e2e.md, run 53)
    timed = harness_covered(results) if every_cell else set()
    for cell in cells:
        # a cell a harness-owned witness confirmed was timed itself: the cost is elsewhere
        # (issue 46: wall times alone never undo a real witness's confirmation)
        if cell["key"] not in flagged or cell["decision"] in ("regressed", "spoofed") \
                or cell.get("confirmation") == "confirmed" or cell["key"] in timed:
            continue
        cell["time_unaccounted"] = True  # holds the headline (grade.py), whatever it says
        if cell["decision"] != "unconfirmed":  # one not believed already keeps its reason
            cell.update(decision="unconfirmed", tier=None, confirmation=COST)
    if every_cell:
        _both_ways(results, cells, costs, timed)


def _both_ways(results: Mapping[str, Any], cells: list[dict[str, Any]],
               costs: list[dict[str, Any] | None], timed: set[str]) -> None:
    """An unchanged cell no witness timed, where the rule times every covered cell: believed
    only where its run's wall clock rules out the witness margin of its work."""
    margin = witness_margin(results["rule"])
    records = {cell_key(c): c for c in results["cells"]}
    runs = [(w["cells"], cost) for w, cost in zip(results.get("witnesses") or [], costs,
                                                 strict=True) if w.get("source") == "samples"]
    for cell in cells:
        key = cell["key"]
        if key in timed or cell["decision"] not in ("neutral", "slower", "inconclusive"):
            continue
        if not any(cost is not None and wall_clock.rules_in(
                float(cost["cost_hi_s"]), records[key], int(covered[key]), margin)
                   for covered, cost in runs if key in covered):
            cell.update(decision="unconfirmed", tier=None, confirmation=NOT_RULED_OUT)
