"""Grading: a pure function of (results, policy) -> verdict. No I/O; table-tested.

The statistical decisions are replayed from the recorded samples with the recorded rule and must
agree with the looks the harness recorded; the policy then turns decisions into labels.
"""

from __future__ import annotations

import math
from statistics import median
from typing import Any

from engine import speed, stats
from evalbot import correctness_policy
from evalbot.errors import ResultsError
from evalbot.policy import TIER_ORDER, Policy
from evalbot.sequential import critical_values

VERDICT_SCHEMA = "evalbot.verdict/1"


def ctx_name(ctx: int) -> str:
    return f"{ctx // 1024}k" if ctx >= 1024 and ctx % 1024 == 0 else str(ctx)


def grade(results: dict[str, Any], policy: Policy) -> dict[str, Any]:
    """Turn a validated results document into a verdict under `policy`."""
    _check_rule(results)
    roles = {m["name"]: m.get("role", "primary") for m in results["models"]}
    spaces = {m["name"]: m.get("namespace") or f"eval-{m['name']}" for m in results["models"]}
    cells = [_cell(c, results["rule"]) for c in results["cells"]]
    corr = correctness_policy.decide(results.get("correctness"), policy.correctness)
    verdict: dict[str, Any] = {
        "schema": VERDICT_SCHEMA,
        "cells": cells,
        "correctness": corr,
        "failures": results["failures"],
        "provenance": _provenance(results, policy),
        "reasons": [],
    }
    kind, best = _kind(results, cells, corr, roles, policy, verdict["reasons"])
    tier = _tier(best, policy) if best else None
    headline = _headline(kind, tier)
    regressions = sorted({_regression_label(c) for c in cells if c["decision"] == "regressed"})
    models = [
        {"name": name, "role": roles[name], "namespace": spaces[name],
         "label": f"{spaces[name]}:{_model_label(name, cells, kind, policy)}"}
        for name in roles
    ]
    verdict.update(
        kind=kind,
        headline=headline,
        tier=tier,
        best_cell=best["key"] if best else None,
        context_label=f"{ctx_name(best['ctx'])}-context" if best else None,
        regression_labels=regressions,
        models=models,
    )
    verdict["labels"] = [headline, *(m["label"] for m in models),
                         *([verdict["context_label"]] if best else []), *regressions]
    return verdict


def _check_rule(results: dict[str, Any]) -> None:
    """The recorded critical values must be what the policy arithmetic gives for this family."""
    rule = results["rule"]
    if not results["cells"]:
        return
    alpha = rule.get("alpha")
    if alpha is None:
        return
    expected = critical_values(rule["looks"], len(results["cells"]), alpha)
    if any(abs(a - b) > 1e-6 for a, b in zip(expected, rule["critical"], strict=True)):
        raise ResultsError("results: recorded critical values do not match the stopping rule")


def _cell(record: dict[str, Any], rule: dict[str, Any]) -> dict[str, Any]:
    key = f"{record['model']}/{record['metric']}@{record['ctx']}"
    try:
        looks = speed.replay(record, rule["looks"], rule["critical"], rule["sd_floor"],
                             rule["significance"], rule["tolerance"])
    except ValueError as exc:
        raise ResultsError(f"{key}: {exc}") from exc
    recorded = [lk["decision"] for lk in record["looks"]]
    if recorded != [lk.decision for lk in looks]:
        raise ResultsError(f"{key}: recorded looks {recorded} disagree with the replay "
                           f"{[lk.decision for lk in looks]}")
    last = looks[-1] if looks else None
    kept = [s for s in record["samples"] if not s["dropped"]]
    base = [s["value"] for s in kept if s["side"] == "base"]
    head = [s["value"] for s in kept if s["side"] == "head"]
    return {
        "key": key,
        "model": record["model"],
        "metric": record["metric"],
        "ctx": record["ctx"],
        "unit": record["unit"],
        "decision": stats.final_decision(looks),
        "speedup": last.estimate if last else None,
        "lo": last.lo if last else None,
        "hi": last.hi if last else None,
        "pairs": last.pairs if last else 0,
        "looks": len(looks),
        "dropped_pairs": len({s["pair"] for s in record["samples"] if s["dropped"]}),
        "base_median": median(base) if base else None,
        "head_median": median(head) if head else None,
    }


def _kind(results: dict[str, Any], cells: list[dict[str, Any]], corr: dict[str, Any],
          roles: dict[str, str], policy: Policy, reasons: list[str]) -> tuple[str, dict | None]:
    failures = results["failures"]
    pr = [f for f in failures if f["attribution"] == "pr"]
    if pr:
        reasons.append(f"{pr[0]['stage']} of the PR: {pr[0]['message']}")
        return pr[0]["kind"], None
    if failures:
        reasons.append(f"{failures[0]['stage']} failed ({failures[0]['side']}): "
                       f"{failures[0]['message']}")
        return "infra-error", None
    if corr["decision"] == "reject":
        reasons.extend(corr["reasons"])
        return "incorrect", None
    regressed = [c for c in cells if c["decision"] == "regressed"]
    if regressed and policy.regression_rejects:
        reasons.extend(f"{c['key']} regressed by {-100 * c['speedup']:.1f}%" for c in regressed)
        return "regressed", None
    improved = [c for c in cells if c["decision"] == "improved" and roles[c["model"]] == "primary"]
    if improved:
        best = max(improved, key=lambda c: _gain(c, policy))
        reasons.append(f"best cell {best['key']}: {100 * best['speedup']:+.1f}%")
        return "improved", best
    if any(c["decision"] == "inconclusive" for c in cells):
        reasons.append("some cells stayed undecided within the pair budget")
        return "inconclusive", None
    return "neutral", None


def _gain(cell: dict[str, Any], policy: Policy) -> float:
    """The gain a tier is judged on; prefill by the reduction of time to first token."""
    value = cell["lo"] if policy.tier_by == "lower_bound" else cell["speedup"]
    if cell["metric"] == "prefill":
        return 1 - 1 / (1 + value) if value > -1 else -math.inf
    return float(value)


def _tier(best: dict[str, Any], policy: Policy) -> str:
    gain = _gain(best, policy)
    for name in TIER_ORDER:
        if gain >= policy.tiers[name]:
            return name
    return TIER_ORDER[-1]  # improved cells cleared s already: the floor is the smallest tier


def _headline(kind: str, tier: str | None) -> str:
    if kind == "improved":
        return f"eval:{tier}"
    if kind == "neutral":
        return "eval:none"
    if kind in ("inconclusive", "infra-error"):
        return f"eval:{kind}"
    return "eval:REJECT"


def _model_label(name: str, cells: list[dict[str, Any]], kind: str, policy: Policy) -> str:
    if kind not in ("improved", "neutral", "inconclusive", "regressed"):
        return "infra-error" if kind == "infra-error" else "REJECT"
    mine = [c for c in cells if c["model"] == name]
    if any(c["decision"] == "regressed" for c in mine):
        return "REJECT"
    improved = [c for c in mine if c["decision"] == "improved"]
    if improved:
        return _tier(max(improved, key=lambda c: _gain(c, policy)), policy)
    return "inconclusive" if any(c["decision"] == "inconclusive" for c in mine) else "none"


def _regression_label(cell: dict[str, Any]) -> str:
    return f"regression-{ctx_name(cell['ctx'])}{'-pp' if cell['metric'] == 'prefill' else ''}"


def _provenance(results: dict[str, Any], policy: Policy) -> dict[str, Any]:
    corr = results.get("correctness") or {}
    return {
        "job_id": results["job_id"],
        "profile": results["profile"],
        "base_sha": results["base"]["sha"],
        "head_sha": results["head"]["sha"],
        "merge_base": results.get("merge_base"),
        "policy": policy.ident,
        "rule": results["rule"],
        "seed": corr.get("seed"),
        "corpus_version": corr.get("corpus_version"),
        "models": results["models"],
        "harness_version": results.get("harness_version"),
        "box": results["box"],
    }
