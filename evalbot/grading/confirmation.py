"""Does the harness's own clock confirm the saving a head's printed rates claim? Pure; table-tested.

A printed rate is the PR's claim. Per witness (engine/measure/witness.py) and per covered cell c, the claim
is the time the head's rates say it saves in one witness process, tokens_c x (1/base - 1/head)
over the geometric means of the cell's kept samples; the evidence is the per-pair difference of
main's and the head's witness times, measured by the harness, as a one-sided t interval: on the
witness's own sd, or pooled with its calibrated floor (`sd_floor_s`, `floor_df`) unless the F
guard says the pairs refute it (engine/contract/shared/witness_interval.py, docs/trust.md).

  confirmed     the lower bound, less the other covered cells' claimed savings (positive ones)
                and less the work the head may have skipped (a process agreeing with main
                on a share a of its ids proves only that share: up to 1 - a of main's
                measured witness time, `unverified_work_s`; a witness credits only verified
                work), is above 0: some saving of c's own is certain at the
                policy's 1 - alpha (never below 1 - MAX_CONFIRM_ALPHA). That lower bound,
                as a rate gain over main's time for c's work, caps the cell's lower bound, so
                the tier is never more than the harness measured (the printed interval stays
                the estimate when it is tighter)
  contradicted  the upper bound at 1 - SPOOF_ALPHA lies below SHOWN_FRACTION of the claimed
                savings of all covered cells: the claim is false, not merely unseen
  unconfirmed   neither, or the witness's output was not verified, or too few pairs
  slower than printed (COSTLY)  no covered cell claims a saving and the upper bound at
                1 - SPOOF_ALPHA is below the claims (cells printed slower lower it): the harness's
                time is longer than the printed rates say (issue 53); likewise a contradiction's
                bound counts the cells printed slower. Cells not improved are then not believed
                (`both_ways`), unless the rule times every covered cell:
  ruled in (`ruled_out`, `witness_every_cell` only)  judged at one of its looks, the witness's
                lower bound at EQUIVALENCE_ALPHA (the printed-rate rule's TOST level, split over
                the looks as confirmation's alpha is) rules out a slowdown of the witness margin
                (rule.margin) of the cell's work, beyond the other covered cells' positive claims
                and the unverified work (engine/contract/shared/witness_interval.py `believed_above`,
                witness_interval.py `rules_out`: the harness's own stop). A covered cell printed
                unchanged is believed only where some witness rules it in: the one rule both ways

A witness with several looks is judged at alpha split over its looks, so stopping early never
makes confirmation (or contradiction) easier than one fixed look; the harness stops at the first
look where this judgement is decided (engine/measure/witness.py `settled`, on the same bounds).

Two rules, recorded per witness (`rule_version`; none: 1). Rule 1 pools the floor with all its
degrees of freedom, guarded by the speed cells' 99% F test, and splits alpha evenly. With the box
twice as noisy as the floor, a head with no saving was confirmed in 5-7% of evaluations: at 3-5
pairs the guard cannot see the floor is stale, and a floor of 24-46 df keeps the pooled sd near
it (issue 46). Rule 2 (new jobs): the floor counts for at most the look's pairs less one degrees
of freedom, the guard is the F test's median (a sample whose sd is above the floor's by about
the median's margin is judged on its own sd), and each look's alpha is in proportion to the
square of its pairs (the last looks, where pooling still helps, get the most): at most 0.75% at
1-3x the floor, and every honest gain rule 1 confirmed in 95% still confirmed in 95%, at a few
more pairs (bench/witness_quality.py, docs/statistics.md section 7).
A witness whose floor the box's stored pairs refute is not run (`stopped: floor_stale`): it
confirms nothing (STALE) until the floor is measured again.

An improved cell stays improved only when some verified witness confirms it; it becomes `spoofed`
when a harness-owned witness (source `witness`) contradicts it, `unconfirmed` otherwise. The run's
own samples count as a witness that can contradict, never confirm (nobody checked their output),
and their contradiction alone is not REJECT-grade: their wall times include everything a process
does besides the claimed work, and at 99.9% per run about 1 honest gain in 600 was REJECTed by
them (issue 46). It makes the cell `unconfirmed` with confirmation WALL_ONLY (the comment says the
harness's clock does not show the saving), and it never undoes a real witness's confirmation.
Other decisions are never touched: a regression needs no confirmation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from evalbot.engine.contract.shared.witness_interval import (
    FLOOR_STALE,
    MIN_PAIRS,
    NO_FLOOR,
    SHOWN_FRACTION,
    Critical,
    Floor,
    Interval,
    believed_above,
    claimed_saving,
    others_claims,
    pair_savings,
    rules_out,
    saving_interval,
    unverified_work_s,
)
from evalbot.engine.contract.witness_spec import WitnessSpec
from evalbot.grading import faulty_box, quantiles, unexplained_cost
from evalbot.grading.sequential import DIGITS, EQUIVALENCE_ALPHA, GUARD_ALPHA, guard

MAX_CONFIRM_ALPHA = 0.005  # confirmation is never weaker than 99.5% one-sided
SPOOF_ALPHA = 0.001  # a contradiction is REJECT-grade: stricter than confirmation
# A confirmed cell's tier is capped at the gain the witness's pairs allow at one-sided 95%: a
# cap at their point gain (min of two noisy estimates, from as few as 3 pairs) lowered honest
# tiers (89.5% right at the XS and S centres, issue 33); the upper bound still stops a printed
# rate from earning more than the harness's clock allows.
TIER_CAP_ALPHA = 0.05
# A cell contradicted by its run's wall times alone (the samples witness): not believed, no REJECT
WALL_ONLY = "contradicted by wall times"
WALL_REASON = "the harness's clock does not show the saving the engine printed; not believed"
WITNESS_RULE = 2  # the rule of new jobs' witnesses (module docstring)
# The rule of a witness whose last look is sized from its floor and `work_s` (evalbot/grading/
# witness_sizing.py): rule 2 but for the alpha split over its looks (`look_alphas`,
# `equivalence_alphas`; docs/statistics.md section 9a)
BOTH_WAYS_RULE = 3
STALE_GUARD_ALPHA = 0.5  # rule 2: the floor's F guard at the test's median
STALE = "floor stale"  # the status of a covered cell whose witness was not run: its floor is refuted
STALE_REASON = "witness floor stale, run `evalbot calibrate`"
# a witness shows the head slower than its printed rates say, at 1 - SPOOF_ALPHA (issue 53): the
# covered cells that are not regressed are not believed (evalbot/grading/unexplained_cost.py COST)
COSTLY = "slower than printed"
# Where the witnesses time every covered cell (`witness_every_cell`), each gets a last look at
# this many times its profile's last: an A/A's unchanged cell is believed only once its witness
# rules out a slowdown of the regression threshold, and at the demo's prefill-1024 (0.058 s of
# a 30% slowdown against 0.03 s a pair) 6 pairs left 1 A/A in 70 not believed; a witness that
# rules it out earlier stops there (bench/hidden_cost.py, docs/statistics.md section 9)
BOTH_WAYS_LAST_LOOK = 2


def confirm_alpha(rule_alpha: float | None, looks: int) -> float:
    """The one-sided alpha of each look of a witness of rule 1: the policy's, never above
    MAX_CONFIRM_ALPHA, split evenly over the looks the harness may stop at (any stopping rule is
    then safe)."""
    return min(float(rule_alpha or MAX_CONFIRM_ALPHA), MAX_CONFIRM_ALPHA) / max(looks, 1)


def look_alphas(looks: tuple[int, ...], alpha: float, version: int) -> list[float]:
    """Each look's one-sided share of the witness's `alpha` (their sum): even under rule 1; under
    rule 2 in proportion to the square of the look's pairs, since a look of few pairs, with the
    floor counted for as many degrees of freedom, can confirm only a saving its last look would
    confirm too (bench/witness_quality.py: with even shares llamacpp's witness confirmed a gain
    at the XS edge in 73% of evaluations, against 85% under rule 1 and rule 2). Rule 3
    (BOTH_WAYS_RULE): as rule 2, the last look, sized from the floor, weighed as if at
    BOTH_WAYS_LAST_LOOK x the look before it: the early looks keep the shares they had."""
    if not looks:
        return [alpha]
    weights = [1] * len(looks) if version < 2 else [n * n for n in looks]
    if version >= BOTH_WAYS_RULE and len(looks) > 1:
        weights[-1] = min(looks[-1], BOTH_WAYS_LAST_LOOK * looks[-2]) ** 2
    return [alpha * w / sum(weights) for w in weights]


def equivalence_alphas(looks: tuple[int, ...], version: int) -> list[float]:
    """Each look's share of the equivalence bound's EQUIVALENCE_ALPHA: as confirmation's up to
    rule 2; under rule 3 the same at every look (Pocock-like): at n^2 an honest A/A on the H100
    seldom ruled a slowdown out before its sized last look; even, a decode witness's A/A stopped
    at 12-17 pairs, not 15-24, for a last look 4-5 pairs longer (bench/hidden_cost.py --splits)."""
    if version >= BOTH_WAYS_RULE and looks:
        return [EQUIVALENCE_ALPHA / len(looks)] * len(looks)
    return look_alphas(looks, EQUIVALENCE_ALPHA, version)


def alpha_at(looks: tuple[int, ...], pairs: int, alpha: float, version: int) -> float:
    """The alpha the bot judges `pairs` pairs at: that of the last look they reached (the
    first look's where they fall short of it), as the harness's stop at that look did."""
    return _reached(looks, look_alphas(looks, alpha, version), pairs)


def equivalence_alpha_at(looks: tuple[int, ...], pairs: int, version: int) -> float:
    """`alpha_at` for the equivalence bound (`equivalence_alphas`)."""
    return _reached(looks, equivalence_alphas(looks, version), pairs)


def _reached(looks: tuple[int, ...], shares: list[float], pairs: int) -> float:
    reached = [a for n, a in zip(looks, shares, strict=False) if n <= pairs]
    return reached[-1] if reached else shares[0]


def with_stops(spec: WitnessSpec, rule_alpha: float, version: int = WITNESS_RULE,
               both_ways: bool = False, last: int = 0) -> WitnessSpec:
    """The witness as the job carries it: the critical values of each look, of confirmation,
    of contradiction and of equivalence, at which the harness may stop measuring
    (engine/measure/witness.py): for the own sd and, where the witness has a calibrated floor,
    for the pooled sd with the guard and (rule 2) the degrees of freedom the floor counts for at
    each look. `both_ways` (`speed.witness_every_cell`): one more look, at `last` pairs (0:
    BOTH_WAYS_LAST_LOOK times the profile's last; evalbot/grading/witness_sizing.py sizes it
    from the floor), for an unchanged cell's equivalence (issue 53)."""
    if both_ways:
        last = max(last, BOTH_WAYS_LAST_LOOK * spec.looks[-1])
        spec = replace(spec, looks=(*spec.looks, last), pairs=last)
    looks = len(spec.looks)
    alphas = look_alphas(spec.looks, confirm_alpha(rule_alpha, 1), version)
    crit = [critical(n, a, SPOOF_ALPHA / looks, spec.floor_df, version)
            for n, a in zip(spec.looks, alphas, strict=True)]
    pooled = Floor(spec.sd_floor_s, spec.floor_df).given
    eq = [critical(n, a, a, spec.floor_df, version)
          for n, a in zip(spec.looks, equivalence_alphas(spec.looks, version), strict=True)]
    return replace(spec, rule_version=version, stop_t=tuple(c.lower for c in crit),
                   equivalence_t=tuple(c.lower for c in eq),
                   pooled_equivalence_t=tuple(c.lower_pooled for c in eq) if pooled else (),
                   spoof_t=tuple(c.upper for c in crit),
                   pooled_stop_t=tuple(c.lower_pooled for c in crit) if pooled else (),
                   pooled_spoof_t=tuple(c.upper_pooled for c in crit) if pooled else (),
                   guard=tuple(c.guard for c in crit) if pooled else (),
                   pooled_df=tuple(c.floor_df for c in crit) if pooled and version >= 2 else ())


def critical(pairs: int, alpha: float, spoof_alpha: float, floor_df: int = 0,
             version: int = 1) -> Critical:
    """One look's one-sided t quantiles: confirmation at 1 - alpha, contradiction at
    1 - spoof_alpha, at pairs - 1 df (own sd) and, with a floor of floor_df df, pooled: rule 1
    at floor_df + pairs - 1 df with the speed cells' F guard; rule 2 with the floor counted
    for at most pairs - 1 df and guarded at the F test's median. Rounded as the job carries
    them."""
    def t(level: float, df: int) -> float:
        return round(quantiles.t_isf(level, df), DIGITS)

    if floor_df <= 0:
        return Critical(t(alpha, pairs - 1), t(spoof_alpha, pairs - 1))
    counted = min(floor_df, pairs - 1) if version >= 2 else floor_df
    pooled = counted + pairs - 1
    level = STALE_GUARD_ALPHA if version >= 2 else GUARD_ALPHA
    return Critical(t(alpha, pairs - 1), t(spoof_alpha, pairs - 1), t(alpha, pooled),
                    t(spoof_alpha, pooled), guard(pairs, counted, level),
                    counted if version >= 2 else 0)


def interval(d: np.ndarray, base_s: float, alpha: float, floor: Floor = NO_FLOOR,
             version: int = 1) -> Interval:
    """One-sided bounds at 1 - alpha (both sides) of the mean per-pair saving, pooled with the
    floor unless the pairs refute it (the harness's stop rule applies the same function to the
    bot's per-look values)."""
    return saving_interval(d, base_s, critical(len(d), alpha, alpha, floor.df, version), floor)


def equivalence_critical(looks: tuple[int, ...], pairs: int, floor: Floor,
                         version: int) -> Critical | None:
    """The equivalence bound's critical values for `pairs` pairs: the printed-rate rule's TOST
    level (EQUIVALENCE_ALPHA) split over the looks as `with_stops` split it, which the harness
    stopped on; None off a look (a witness cut between looks, or that lost a pair's base
    output), where the harness decided nothing."""
    if pairs not in looks:
        return None
    a = equivalence_alpha_at(looks, pairs, version)
    return critical(pairs, a, a, floor.df, version)


def judge(witness: Mapping[str, Any], claims: Mapping[str, tuple[float, float]],
          alpha: float, margin: float = 0.0) -> dict[str, Any]:
    """One witness: its interval and, per covered cell with a claim, the status, the gain
    the harness measured for it (a lower bound) and whether it rules out a slowdown of the
    witness margin `margin` of the cell's work (`ruled_out`, engine/measure/
    witness_interval.py `rules_out`, the harness's own stop; 0: not asked)."""
    confirming = witness.get("source", "witness") == "witness"
    samples = witness["samples"]
    unverified = confirming and any(not s.get("verified") and not s["dropped"] for s in samples
                                    if s["side"] == "head")
    d = pair_savings(samples, need_verified=confirming)
    out: dict[str, Any] = {"name": witness["name"], "source": witness.get("source", "witness"),
                           "pairs": len(d), "stopped": witness.get("stopped", ""), "cells": {}}
    if witness.get("stopped") == FLOOR_STALE:  # not run: it confirms nothing on this box
        out["cells"] = {k: {"status": STALE, "claimed_s": c, "gain_lo": None, "gain": None,
                            "gain_hi": None} for k, (c, _) in claims.items() if k in witness["cells"]}
        return out
    if len(d) < MIN_PAIRS:
        out["note"] = f"{len(d)} usable pairs"
        return out
    base_s = float(np.mean([s["seconds"] for s in samples if s["side"] == "base"]))
    looks = tuple(witness.get("looks") or ())  # each look the harness could stop at
    version = int(witness.get("rule_version") or 1)
    floor = Floor(float(witness.get("sd_floor_s") or 0.0), int(witness.get("floor_df") or 0))
    bounds = saving_interval(d, base_s, critical(
        len(d), alpha_at(looks, len(d), alpha, version), SPOOF_ALPHA / max(len(looks), 1),
        floor.df, version), floor)
    mean, lo, hi_strict = bounds.mean, bounds.lo, bounds.hi
    # the most the pairs allow (one-sided 1 - TIER_CAP_ALPHA): the cap on a confirmed cell's tier
    cap_hi = saving_interval(d, base_s, critical(len(d), TIER_CAP_ALPHA, TIER_CAP_ALPHA,
                                                 floor.df, version), floor).hi
    out.update(saving_s=mean, lo_s=lo, hi_s=hi_strict, sd=bounds.sd)
    claims = {k: v for k, v in claims.items() if k in witness["cells"]}
    total = sum(max(v[0], 0.0) for v in claims.values())
    skipped = unverified_work_s(samples) if confirming else 0.0
    out["unverified_s"] = skipped
    # the harness's own wall-time check of the run (engine/measure/spoof.py), samples only; its
    # text stays in the results: its figures come from the PR's printed rates (issue 31)
    wall_reason = not confirming and bool(witness.get("wall_reason"))
    # what the printed rates say of the cells printed slower (<= 0): a saving they do not claim
    negative = sum(min(v[0], 0.0) for v in claims.values())
    eq = equivalence_critical(looks, len(d), floor, version) if margin > 0 else None
    for key, (claim, main_s) in claims.items():
        others = others_claims(claims, key) + skipped  # taken as true, and as skipped
        own_lo = lo - others
        if total > 0 and hi_strict < SHOWN_FRACTION * total + negative or (wall_reason and claim > 0):
            status = "contradicted"  # a samples witness's: not believed, never REJECT (_apply)
        elif confirming and not unverified and total <= 0 and hi_strict < negative:
            status = COSTLY  # the harness's time is longer than the printed rates say
        elif confirming and not unverified and claim > 0 and own_lo > 0:
            status = "confirmed"
        else:
            status = "unverified" if unverified else "unconfirmed"
        gain_lo = main_s / (main_s - own_lo) - 1 if 0 < own_lo < main_s else None
        own_mean = mean - others
        gain = main_s / (main_s - own_mean) - 1 if 0 < own_mean < main_s else None
        own_hi = cap_hi - others
        # None: the pairs allow any gain (a cell whose time they could all but remove)
        gain_hi = (None if own_hi >= main_s else
                   main_s / (main_s - own_hi) - 1 if own_hi > 0 else 0.0)
        above = believed_above(claims, [key], margin)
        ruled_out = eq is not None and above is not None and confirming and not unverified \
            and rules_out(d, base_s, eq, floor, above + skipped)
        out["cells"][key] = {"status": status, "claimed_s": claim, "gain_lo": gain_lo,
                             "gain": gain, "gain_hi": gain_hi, "ruled_out": ruled_out}
    return out


def confirm(results: Mapping[str, Any], cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Apply the witnesses to graded cells (in place): improved -> unconfirmed | spoofed unless a
    verified witness confirms. Returns the judged witnesses. A results document without the
    `witnesses` key is from a harness before witnesses: left as it was graded then."""
    if "witnesses" not in results:
        return []
    alpha = confirm_alpha(results["rule"].get("alpha"), 1)
    records = {_key(c): c for c in results["cells"]}
    every = bool(results["rule"].get("witness_every_cell"))
    margin = unexplained_cost.witness_margin(results["rule"])
    judged = []
    for w in results["witnesses"]:
        claims = {k: s for k, t in w["cells"].items() if k in records
                  for s in [claimed_saving(records[k]["samples"], int(t),
                                           records[k].get("higher_is_better", True))]
                  if s is not None}
        judged.append(judge(w, claims, alpha, margin))
    covered = unexplained_cost.harness_covered(results)
    for cell in cells:
        _apply(cell, judged)
        if cell["decision"] not in ("regressed", "spoofed"):
            both_ways(cell, judged, every and cell["key"] in covered)
    faulty_box.not_called_lies(results, cells)
    return judged


def _apply(cell: dict[str, Any], judged: list[dict[str, Any]]) -> None:
    """One cell: its confirmation summary and, if improved, what the witnesses make of it."""
    statuses = [j["cells"][cell["key"]]["status"] for j in judged if cell["key"] in j["cells"]]
    real = [j["cells"][cell["key"]]["status"] for j in judged
            if cell["key"] in j["cells"] and j["source"] == "witness"]
    measured = [j["cells"][cell["key"]]["gain_lo"] for j in judged
                if j["cells"].get(cell["key"], {}).get("status") == "confirmed"]
    # wall times alone: neither a REJECT nor a veto of a real witness's confirmation
    wall_only = "contradicted" in statuses and "contradicted" not in real and not measured
    cell["confirmation"] = WALL_ONLY if wall_only else _summary(real if measured else statuses)
    if cell["decision"] != "improved":
        return
    if "contradicted" in real:
        cell["decision"], cell["tier"] = "spoofed", None
    elif not measured:
        cell["decision"], cell["tier"] = "unconfirmed", None
    else:
        _cap(cell, judged)


def both_ways(cell: dict[str, Any], judged: list[dict[str, Any]], must_time: bool) -> None:
    """Where the rule times every covered cell (`must_time`, issue 53), an unchanged one is
    believed only where a witness of the harness ruled a slowdown of the witness margin
    out: else it is not believed, NOT_RULED_OUT where a witness timed it, UNTIMED where none
    could (its head output failed, too few pairs, a stale floor). That one rule replaces, for
    these cells, the check below. Elsewhere a cell its witness shows slower than printed (or
    contradicts) is not believed. An improved one unconfirmed is not believed already."""
    real = [j["cells"][cell["key"]] for j in judged
            if cell["key"] in j["cells"] and j["source"] == "witness"]
    statuses = {c["status"] for c in real}
    if must_time and cell["decision"] in ("neutral", "slower", "inconclusive"):
        if not any(c.get("ruled_out") for c in real):
            timed = statuses & {"confirmed", "unconfirmed", "contradicted", COSTLY}
            cell.update(decision="unconfirmed", tier=None, confirmation=unexplained_cost.
                        NOT_RULED_OUT if timed else unexplained_cost.UNTIMED)
    elif COSTLY in statuses or "contradicted" in statuses:  # an unchanged cell's noise claim
        cell.update(decision="unconfirmed", tier=None, confirmation=unexplained_cost.COST)


def _cap(cell: dict[str, Any], judged: list[dict[str, Any]]) -> None:
    """A confirmed cell: the tier is judged on no more than the harness measured."""
    mine = [j["cells"][cell["key"]] for j in judged
            if j["cells"].get(cell["key"], {}).get("status") == "confirmed"]
    # None: a witness saved more than main's printed time for the cell's work, so it
    # bounds no gain (JSON has no infinity: a verdict is signed, evalbot/audit/signing.py)
    cell["witness_lo"] = _most([c["gain_lo"] for c in mine])
    if cell["witness_lo"] is not None:
        cell["lo"] = min(cell["lo"], cell["witness_lo"])
    cell["witness_gain"] = _most([c.get("gain") for c in mine])
    highs = [c.get("gain_hi") for c in mine]
    if None not in highs:  # else no cap: some witness allows any gain
        cell["witness_gain_hi"] = max(highs)


def _most(gains: list[float | None]) -> float | None:
    """The largest gain, None where any is unbounded (None)."""
    return None if None in gains else max(g for g in gains if g is not None)


def _summary(statuses: list[str]) -> str:
    for status in ("contradicted", COSTLY, "confirmed", STALE, "unverified", "unconfirmed"):
        if status in statuses:
            return status
    return "no witness"


def _key(record: Mapping[str, Any]) -> str:
    return f"{record['model']}/{record['metric']}@{record['ctx']}"
