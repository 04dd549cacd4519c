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
cells' F guard): engine/measure/witness_interval.py's interval, so the two clocks' checks share
one piece of arithmetic. Bonferroni over the runs keeps an honest PR's false flags at COST_ALPHA
whatever its runs (bench/spoof_quality.py `hidden`, docs/statistics.md "One clock").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from evalbot.engine.measure.witness_interval import Critical, Floor, saving_interval
from evalbot.grading import quantiles
from evalbot.grading.sequential import GUARD_ALPHA, guard

COST_ALPHA = 0.001  # an honest PR's chance of a flag, all its runs together
MIN_OWN_PAIRS = 3  # without a floor, fewer pairs than this judge nothing
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


def pair_costs(witness: Mapping[str, Any], records: Mapping[str, Mapping[str, Any]]) -> np.ndarray:
    """u_i per kept pair of a samples witness: (head wall - head's rates' work) - (base's)."""
    work: dict[tuple[int, str], float] = {}
    for key, tokens in witness["cells"].items():
        record = records.get(key)
        if record is None or not record.get("higher_is_better", True):
            continue  # a latency cell prints seconds, not a rate: no work to account for
        for s in record["samples"]:
            if not s["dropped"] and s["value"] > 0:
                at = (s["pair"], s["side"])
                work[at] = work.get(at, 0.0) + int(tokens) / float(s["value"])
    unaccounted: dict[int, dict[str, float]] = {}
    for s in witness["samples"]:
        if not s["dropped"] and (s["pair"], s["side"]) in work:
            unaccounted.setdefault(s["pair"], {})[s["side"]] = \
                float(s["seconds"]) - work[(s["pair"], s["side"])]
    return np.array([p["head"] - p["base"] for _, p in sorted(unaccounted.items())
                     if set(p) == {"base", "head"}])


def judge_cost(u: np.ndarray, floor: Floor, alpha: float) -> dict[str, Any] | None:
    """The cost interval's figures and whether it is flagged; None when the pairs judge nothing."""
    n = len(u)
    if n < 2 or (n < MIN_OWN_PAIRS and not floor.given):
        return None
    t_own = quantiles.t_isf(alpha, n - 1)
    crit = Critical(t_own, t_own)
    if floor.given:
        t_pooled = quantiles.t_isf(alpha, floor.df + n - 1)
        crit = Critical(t_own, t_own, t_pooled, t_pooled, guard(n, floor.df, GUARD_ALPHA))
    # saving_interval's "saving" is -u: its upper bound is minus the cost's lower bound
    bounds = saving_interval(-u, 0.0, crit, floor)
    return {"pairs": n, "cost_s": -bounds.mean, "cost_lo_s": -bounds.hi, "sd": bounds.sd,
            "flagged": -bounds.hi > 0}


def unexplained_costs(results: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per samples witness (by name): its cost judgement, where its pairs judge one."""
    samples = [w for w in results.get("witnesses") or [] if w.get("source") == "samples"]
    records = {f"{c['model']}/{c['metric']}@{c['ctx']}": c for c in results["cells"]}
    out = {}
    for w in samples:
        floor = Floor(float(w.get("sd_floor_s") or 0.0), int(w.get("floor_df") or 0))
        judged = judge_cost(pair_costs(w, records), floor, COST_ALPHA / len(samples))
        if judged is not None:
            out[w["name"]] = {**judged, "cells": sorted(w["cells"])}
    return out


def apply(results: Mapping[str, Any], cells: list[dict[str, Any]],
          witnesses: list[dict[str, Any]]) -> None:
    """Flagged runs' cells (in place): every cell not already regressed or spoofed is not
    believed, but for one a harness witness timed: confirmed, or (where the rule times every
    covered cell) judged by the one rule on its own clock (confirmation.py `both_ways`). Each
    samples witness's judgement joins the verdict's `witnesses` as `cost`."""
    costs = unexplained_costs(results)
    for w in witnesses:
        if w["name"] in costs:
            w["cost"] = costs[w["name"]]
    flagged = {k for c in costs.values() if c["flagged"] for k in c["cells"]}
    # Whole-process wall times include the load, which two builds of the same code need not
    # share: a GPU A/A's docs-only head took 0.30 s longer a process in both of its pairs, its
    # printed rates and its witnesses' handoff clocks equal to main's (docs/gpu-e2e.md, run 53)
    timed = harness_covered(results) if results["rule"].get("witness_every_cell") else set()
    for cell in cells:
        # a cell a harness-owned witness confirmed was timed itself: the cost is elsewhere
        # (issue 46: wall times alone never undo a real witness's confirmation)
        if cell["key"] not in flagged or cell["decision"] in ("regressed", "spoofed") \
                or cell.get("confirmation") == "confirmed" or cell["key"] in timed:
            continue
        cell["time_unaccounted"] = True  # holds the headline (grade.py), whatever it says
        if cell["decision"] != "unconfirmed":  # one not believed already keeps its reason
            cell.update(decision="unconfirmed", tier=None, confirmation=COST)
