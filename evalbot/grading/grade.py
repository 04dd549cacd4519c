"""Grading: a pure function of (results, policy) -> verdict. No I/O; table-tested.

The statistical decisions are replayed from the recorded samples with the recorded rule and must
agree with the looks the harness recorded; the policy then turns decisions into labels:
  default            tier of the best improved primary cell by its estimate (its tier settled
                     by the harness, engine/contract/shared/stats.py), capped by what its witness allows
  sparkinfer-compat  the existing bot's label function on the geometric means (evalbot.grading.compat)
Order of the verdict kinds: a PR failure, an infra failure (or a cell never measured), a wrong
answer, a regression anywhere (guards included), an improvement, inconclusive, neutral.
"""

from __future__ import annotations

import math
from statistics import median
from typing import Any

from evalbot.config.errors import ResultsError
from evalbot.engine.contract.shared import replay, stats
from evalbot.engine.contract.verdict import Verdict
from evalbot.grading import (
    compat,
    confirmation,
    correctness_headline,
    correctness_policy,
    faulty_box,
    published,
    unexplained_cost,
)
from evalbot.grading.policy import TIER_ORDER, Policy
from evalbot.grading.sequential import EQUIVALENCE_ALPHA, MAX_ALPHA, fault_sigmas, schedule

RANK = {**{t: len(TIER_ORDER) - i for i, t in enumerate(TIER_ORDER)}, "none": 0}


def ctx_name(ctx: int) -> str:
    return f"{ctx // 1024}k" if ctx >= 1024 and ctx % 1024 == 0 else str(ctx)


def grade(results: dict[str, Any], policy: Policy) -> dict[str, Any]:
    """Turn a validated results document into a verdict under `policy`."""
    _check_rule(results)
    roles = {m["name"]: m.get("role", "primary") for m in results["models"]}
    spaces = {m["name"]: m.get("namespace") or f"eval-{m['name']}" for m in results["models"]}
    try:  # the cells of one run test the calibration together (replay.replay_all)
        replayed = replay.replay_all(results["cells"], results["rule"])
    except ValueError as exc:
        raise ResultsError(f"results: {exc}") from exc
    cells = [_cell(c, looks, results["rule"], roles, policy)
             for c, looks in zip(results["cells"], replayed, strict=True)]
    witnesses = confirmation.confirm(results, cells)  # improved -> unconfirmed | spoofed
    # time the printed rates do not account for: the run's cells not believed (issue 53)
    unexplained_cost.apply(results, cells, witnesses)
    version = int(results["rule"].get("rule_version") or 1)
    for cell in cells:  # a confirmed cell's lower bound may have been capped by its witness
        if cell["decision"] == "improved" and "witness_lo" in cell:
            _tier_cell(cell, policy, version)
    published.mark(cells)  # what is published of them: evalbot/report/publication.py
    corr = correctness_policy.decide(results.get("correctness"), policy.correctness)
    guards = [correctness_policy.decide(s, policy.correctness)
              for s in results.get("correctness_guards") or []]
    reasons: list[str] = []
    kind, best = _kind(results, cells, correctness_headline.combined(corr, guards), policy,
                       reasons)
    # a model's own correctness outcome is its label under every headline (issue 46)
    forced = correctness_headline.model_labels(corr, guards)
    tier = best["tier"] if best else None
    headline = _headline(kind, tier)
    regressions = sorted({_regression_label(c) for c in cells if c["decision"] == "regressed"})
    models = [
        {"name": name, "role": roles[name], "namespace": spaces[name],
         "label": f"{spaces[name]}:{forced.get(name) or _model_label(name, cells, kind, headline)}"}
        for name in roles
    ]
    context = f"{ctx_name(best['ctx'])}-context" if best else None
    return Verdict(
        kind=kind, headline=headline, tier=tier, best_cell=best["key"] if best else None,
        context_label=context, regression_labels=tuple(regressions), models=tuple(models),
        labels=(headline, *(m["label"] for m in models), *([context] if context else []),
                *regressions),
        cells=tuple(cells), correctness=corr, correctness_guards=tuple(guards),
        failures=tuple(dict(f) for f in results["failures"]),  # published as report says
        provenance=_provenance(results, policy), reasons=tuple(reasons),
        witnesses=tuple(witnesses)).to_json()


def _check_rule(results: dict[str, Any]) -> None:
    """The recorded rule must control its errors (0 < alpha <= MAX_ALPHA) and carry the critical
    values the policy arithmetic gives for its alpha and family, one per look."""
    rule = results["rule"]
    looks = list(rule["looks"])
    for key in ("critical", "critical_floor", "equivalence", "equivalence_floor", "settle",
                "settle_floor", "guard"):
        values = rule.get(key)
        if (key == "critical" or values) and len(values) != len(looks):
            raise ResultsError(f"results: rule.{key} has {len(values)} values for "
                               f"{len(looks)} looks")
    floors = [rule["sd_floor"], *(rule.get("sd_floors") or {}).values()]
    if not all(isinstance(f, int | float) and math.isfinite(f) and f > 0 for f in floors):
        raise ResultsError(f"results: an sd floor of the rule is not a positive noise ({floors})")
    if not results["cells"] or rule.get("alpha") is None:
        return  # a hand-written rule without alpha: nothing to recompute it from
    if not 0 < rule["alpha"] <= MAX_ALPHA:
        raise ResultsError(f"results: the rule's alpha {rule['alpha']} controls no error "
                           f"(at most {MAX_ALPHA})")
    family = rule.get("family") or len(results["cells"])
    if family < len(results["cells"]):
        raise ResultsError(f"results: the rule's family of {family} cells is smaller than the "
                           f"{len(results['cells'])} cells measured")
    try:
        expected = schedule(looks, family, rule["alpha"],
                            rule.get("equivalence_alpha") or EQUIVALENCE_ALPHA,
                            int(rule.get("pool_df") or 0), int(rule.get("rule_version") or 1))
    except ValueError as exc:
        raise ResultsError(f"results: rule: {exc}") from exc
    recorded = replay.bounds_of(rule)
    lists = {"critical": "directional", "critical_floor": "directional_floor",
             "equivalence": "equivalence", "equivalence_floor": "equivalence_floor",
             "settle": "settle", "settle_floor": "settle_floor", "guard": "guard"}
    for key, attr in lists.items():
        if key != "critical" and not rule.get(key):
            if rule.get("pool_df"):
                raise ResultsError(f"results: the pooled rule lacks rule.{key}")
            continue  # the first rule version carried only `critical`
        if any(abs(getattr(a, attr) - getattr(b, attr)) > 1e-6
               for a, b in zip(expected, recorded, strict=True)):
            raise ResultsError(f"results: recorded rule.{key} does not match the stopping rule")
    sigmas = fault_sigmas(int(rule.get("rule_version") or 1), int(rule.get("pool_df") or 0))
    if float(rule.get("fault_sigmas") or 0) != sigmas:
        raise ResultsError(f"results: rule.fault_sigmas {rule.get('fault_sigmas')} is not the "
                           f"fault screen of its rule version ({sigmas})")


def _cell(record: dict[str, Any], looks: list[stats.Look], rule: dict[str, Any],
          roles: dict[str, str], policy: Policy) -> dict[str, Any]:
    key = replay.cell_key(record)
    if record["model"] not in roles:
        raise ResultsError(f"{key}: model {record['model']!r} is not among the results' models")
    recorded = [lk["decision"] for lk in record["looks"]]
    if recorded != [lk.decision for lk in looks]:
        raise ResultsError(f"{key}: recorded looks {recorded} disagree with the replay "
                           f"{[lk.decision for lk in looks]}")
    last = looks[-1] if looks else None
    kept = [s for s in record["samples"] if not s["dropped"]]
    n = last.pairs if last else 0
    # the columns and the change come from the same pairs: the ones the decision used
    base = [s["value"] for s in kept if s["side"] == "base"][:n]
    head = [s["value"] for s in kept if s["side"] == "head"][:n]
    decision = stats.final_decision(looks)
    # The interval shown is the one that decided: the equivalence interval for a neutral cell
    # (it lies inside (-t, +s)), the simultaneous one otherwise; both stay in the verdict.
    neutral = decision == "neutral" and last is not None
    cell = {
        "key": key,
        "model": record["model"],
        "role": roles[record["model"]],
        "metric": record["metric"],
        "ctx": record["ctx"],
        "unit": record["unit"],
        "decision": decision,
        "speedup": last.estimate if last else None,
        "lo": (last.eq_lo if neutral else last.lo) if last else None,
        "hi": (last.eq_hi if neutral else last.hi) if last else None,
        "interval": "equivalence" if neutral else "simultaneous",
        "sim_lo": last.lo if last else None,
        "sim_hi": last.hi if last else None,
        "eq_lo": last.eq_lo if last else None,
        "eq_hi": last.eq_hi if last else None,
        "pairs": n,
        "looks": len(looks),
        # every dropped attempt of a pair counts (a pair index can be re-measured many times)
        "dropped_pairs": sum(1 for s in record["samples"] if s["dropped"] and s["side"] == "base"),
        "stopped": record.get("stopped", ""),
        "sd_floor": (rule.get("sd_floors") or {}).get(key, rule["sd_floor"]),
        "floor_source": _floor_source(key, rule),
        "base_median": median(base) if base else None,
        "head_median": median(head) if head else None,
        # geometric means over the pairs the decision used: their ratio is exp(mean log-ratio)
        "base_gmean": _gmean(base),
        "head_gmean": _gmean(head),
        "anchor": float(record.get("anchor") or 0.0),
        "tier": None,
        "compat": None,
    }
    if last is not None and last.decision == "improving" and int(rule.get("rule_version") or 1) > 1:
        # improved with its tier unsettled at the end: judged on the lower end of its tier
        # interval, so an effect just under an edge is not tiered above it by its estimate
        cell["tier_gain"] = last.tier_lo
    if cell["decision"] == "improved":
        _tier_cell(cell, policy)
    return cell


def _floor_source(key: str, rule: dict[str, Any]) -> str:
    if key in (rule.get("calibrated") or []):
        return "calibrated on this box"
    if key in (rule.get("sd_floors") or {}) and "calibrated" not in rule:
        return "calibrated on this box"  # results written before the rule named its sources
    return "the profile's"


def _gmean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _tier_cell(cell: dict[str, Any], policy: Policy, version: int = 2) -> None:
    """The tier an improved cell earns under the policy (compat may say none)."""
    if policy.tier_by == "compat":
        label = compat.cell_label(cell, policy)
        cell["compat"] = label.to_dict()
        cell["tier"] = label.tier
        return
    gain = _gain(cell, policy, version)
    # an improved cell cleared s already: below the smallest threshold it floors at XS
    cell["tier"] = next((t for t in TIER_ORDER if gain >= policy.tiers[t]), TIER_ORDER[-1])


def _gain(cell: dict[str, Any], policy: Policy, version: int = 2) -> float:
    """The gain a tier is judged on; prefill by the reduction of time to first token."""
    value = cell["lo"] if policy.tier_by == "lower_bound" else \
        cell.get("tier_gain", cell["speedup"])
    # a printed rate is a claim: the tier never exceeds the gain the harness's witness allows:
    # its one-sided 95% upper bound (rule version 2); results before it, its point gain (the
    # smaller of two noisy estimates, biased low: it lowered honest tiers, issue 33)
    cap = cell.get("witness_gain_hi" if version >= 2 else "witness_gain")
    value = value if cap is None else min(value, cap)  # None: the witness bounds no gain
    if cell["metric"] == "prefill":
        return 1 - 1 / (1 + value) if value > -1 else -math.inf
    return float(value)


def _best(cells: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The best tiered cell: highest tier, then decode over prefill (a prefill tier replaces
    decode only when strictly higher, as the existing bot does), then the larger gain."""
    compat_cells = [c for c in cells if c["compat"]]
    if compat_cells:  # label.py tiers, per model and metric, the context of largest raw gain
        picked: dict[tuple[str, str], dict[str, Any]] = {}
        for c in compat_cells:
            key = (c["model"], c["metric"])
            if key not in picked or c["compat"]["gain"] > picked[key]["compat"]["gain"]:
                picked[key] = c
        cells = list(picked.values())
    tiered = [c for c in cells if c["tier"] not in (None, "none")]
    if not tiered:
        return None
    return max(tiered, key=lambda c: (RANK[c["tier"]], c["metric"] == "decode",
                                      (c["compat"] or {}).get("effective", c["speedup"])))


def _kind(results: dict[str, Any], cells: list[dict[str, Any]], corr: dict[str, Any],
          policy: Policy, reasons: list[str]) -> tuple[str, dict[str, Any] | None]:
    failures = results["failures"]
    pr = [f for f in failures if f["attribution"] == "pr"]
    if pr:
        reasons.append(f"{pr[0]['stage']} of the PR: {pr[0]['message']}")
        return pr[0]["kind"], None
    if failures:
        reasons.append(f"{failures[0]['stage']} failed ({failures[0]['side']}): "
                       f"{failures[0]['message']}")
        return "infra-error", None
    # a run the shared budget stopped before its first look is undecided, not broken
    unmeasured = [c["key"] for c in cells if c["pairs"] == 0 and c["stopped"] != "budget"]
    if unmeasured:  # a cell without a single look cannot pass silently, guard or not
        reasons.append(f"no measurement for {', '.join(unmeasured)}")
        return "infra-error", None
    if corr["decision"] == "infra-error":  # an unusable reference: never a pass
        reasons.extend(corr["reasons"])
        return "infra-error", None
    if corr["decision"] == "reject":
        reasons.extend(corr["reasons"])
        return "incorrect", None
    spoofed = [c["key"] for c in cells if c["decision"] == "spoofed"]
    if spoofed:
        reasons.append("the harness's clock contradicts the rates printed for "
                       + ", ".join(spoofed))
        return "spoofed", None
    # the band the cells were decided in: the profile's where it sets one (the demo's 30%), not
    # the policy's, which the comment's own figures would then contradict
    tolerance = float(results["rule"].get("tolerance") or policy.tolerance)
    regressed = [c for c in cells if c["decision"] == "regressed"]
    if regressed and policy.regression_rejects:  # the harness then runs no witness: no cell's
        reasons.extend(f"{c['key']} ({c['role']}) regressed by {-100 * c['speedup']:.1f}% "
                       f"[{100 * c['lo']:+.1f}%, {100 * c['hi']:+.1f}%]" for c in regressed)
        return "regressed", None  # lack of one is a reason (engine/measure/witness_plan.py)
    unconfirmed = [c for c in cells if c["decision"] == "unconfirmed"]
    reasons.extend(_unbelieved(c, results["rule"]) for c in unconfirmed)
    if corr["decision"] == "inconclusive":  # no tier on an undecided correctness check
        reasons.extend(corr["reasons"])
        return "inconclusive", None
    if any(c.get("confirmation") in unexplained_cost.CAPPED or c.get("time_unaccounted")
           for c in cells):
        return "inconclusive", None  # a slowdown may hide behind any of the run's rates
    best = _best([c for c in cells if c["role"] == "primary"])
    if best:
        reasons.append(f"best cell {best['key']}: {100 * best['speedup']:+.1f}% "
                       f"[{100 * best['lo']:+.1f}%, {100 * best['hi']:+.1f}%]")
        return "improved", best
    untiered = [c for c in cells if c["tier"] == "none"]
    reasons.extend(f"{c['key']}: {100 * c['compat']['gain']:+.1f}% is within the "
                   f"{100 * policy.significance:.1f}% gate" for c in untiered if c["compat"])
    reasons.extend(f"{c['key']}: significantly slower by {-100 * c['speedup']:.1f}% "
                   f"[{100 * c['sim_lo']:+.1f}%, {100 * c['sim_hi']:+.1f}%], within the "
                   f"{100 * tolerance:.0f}% tolerance" for c in cells
                   if c["decision"] == "slower")
    if unconfirmed and not best:
        return "inconclusive", None
    if any(c["decision"] == "inconclusive" for c in cells):
        reasons.append("some cells stayed undecided within the pair budget: "
                       + ", ".join(c["key"] for c in cells if c["decision"] == "inconclusive"))
        return "inconclusive", None
    return "neutral", None


def _unbelieved(cell: dict[str, Any], rule: dict[str, Any]) -> str:
    """Why an unconfirmed cell's printed speed-up earns nothing."""
    said = {confirmation.WALL_ONLY: confirmation.WALL_REASON,  # inconclusive, not REJECT (issue 46)
            faulty_box.FAULTY_BOX: faulty_box.FAULTY_BOX_REASON,  # inconclusive, not REJECT
            unexplained_cost.COST: unexplained_cost.COST_REASON,
            unexplained_cost.UNTIMED: unexplained_cost.UNTIMED_REASON,
            unexplained_cost.NOT_RULED_OUT: unexplained_cost.not_ruled_out_reason(rule),
            confirmation.STALE: f"not confirmed: {confirmation.STALE_REASON}"}
    reason = said.get(cell["confirmation"]) or (
        f"the printed speed-up is not believed: not confirmed by the harness's clock "
        f"({cell['confirmation']})")
    return f"{cell['key']}: {reason}"


def _headline(kind: str, tier: str | None) -> str:
    if kind == "improved":
        return f"eval:{tier}"
    if kind == "neutral":
        return "eval:none"
    if kind in ("inconclusive", "infra-error"):
        return f"eval:{kind}"
    return "eval:REJECT"


def _model_label(name: str, cells: list[dict[str, Any]], kind: str, headline: str) -> str:
    """The model's label from its cells. A tier shows only under a tiered headline: beside
    eval:none, eval:inconclusive or eval:REJECT it would claim a speed-up the verdict did not
    grant (issue 46), so the model says the headline's word."""
    if kind not in ("improved", "neutral", "inconclusive", "regressed"):
        return "infra-error" if kind == "infra-error" else "REJECT"
    mine = [c for c in cells if c["model"] == name]
    if any(c["decision"] == "regressed" for c in mine):
        return "REJECT"
    best = _best(mine)
    if best:
        return str(best["tier"]) if kind == "improved" else headline.removeprefix("eval:")
    return "inconclusive" if any(c["decision"] in ("inconclusive", "unconfirmed")
                                 for c in mine) else "none"


def _regression_label(cell: dict[str, Any]) -> str:
    return f"regression-{ctx_name(cell['ctx'])}{'-pp' if cell['metric'] == 'prefill' else ''}"


def _provenance(results: dict[str, Any], policy: Policy) -> dict[str, Any]:
    corr = results.get("correctness") or {}
    return {
        "job_id": results["job_id"],
        "profile": results["profile"],
        "profile_version": results.get("profile_version", 1),  # results before it: 1
        "base_sha": results["base"]["sha"],
        "head_sha": results["head"]["sha"],
        "merge_base": results.get("merge_base"),
        "policy": policy.ident,
        "rule": results["rule"],
        "seed": corr.get("seed"),
        "corpus_version": corr.get("corpus_version"),
        "models": results["models"],
        "builds": {side: {k: results[side].get(k) for k in ("duration_s", "cached")}
                   for side in ("base", "head")},
        "harness_version": results.get("harness_version"),
        "box": results["box"],
        # box time per stage, for the comment and the dashboard; only from results that record
        # stages, so re-grading older results gives the verdict they always had
        **({"timing": results["timing"]} if (results.get("timing") or {}).get("stages") else {}),
    }
