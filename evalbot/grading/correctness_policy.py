"""The correctness decision (pure): head against base, chunk by chunk, then floors and consistency.

Order of the rules (docs/correctness.md):
1. A head whose timed decode disagrees with its own score run (beyond near-ties) is REJECT.
2. Bit-identical log-probabilities: inert, pass.
3. The paired look of engine/contract/shared/correctness_stats.py, replayed from the recorded chunks (it must
   agree with the looks the harness recorded): reject / pass / inconclusive (cap reached).
4. Absolute floors, calibrated per model and configuration from main, with their intervals and
   the policy's margins, only when main clears them. Main below a floor means the reference (or
   main) is unusable for judging anyone: an infra-error that names it, never a pass.
Inconclusive (still undecided at the last look) is a real outcome: grading makes the headline
`eval:inconclusive` (evalbot/grading/grade.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from evalbot.config.errors import ResultsError
from evalbot.engine.contract.job import Correctness
from evalbot.engine.contract.shared.correctness_stats import (
    inconsistent,
    look,
    mcnemar_worse,
    sequential,
    summary,
)
from evalbot.engine.contract.shared.segments import chunk_looks, deep_chunks, window_key
from evalbot.grading import correctness_drift, quantiles
from evalbot.grading.policy import CorrectnessPolicy

# Two-sided level of the paired interval, split over the looks (Bonferroni). 0.05: a head
# exactly at the margin is REJECTed at most 2.5% of the time, an equivalent one almost never
# (bench/guard_quality.py: 0 in 600 at every discordance), and a 3-point drop clustered in one
# window in five is caught in >= 99% within the llamacpp profile's 28.7k tokens (0.01: 92%).
ALPHA = 0.05
DIGITS = 6  # critical values travel in JSON: rounded so the replay compares equal numbers

def critical_values(looks: Sequence[int], alpha: float = ALPHA) -> list[float]:
    """Student t quantile per look (K chunks -> K - 1 df), two-sided, Bonferroni over looks."""
    if not looks or looks[0] < 2 or list(looks) != sorted(set(looks)):
        raise ValueError(f"looks {list(looks)}: increasing chunk counts, the first >= 2")
    return list(_critical(tuple(looks), alpha))


@lru_cache(maxsize=256)
def _critical(looks: tuple[int, ...], alpha: float) -> tuple[float, ...]:
    tail = alpha / (2 * len(looks))
    return tuple(round(float(quantiles.t_isf(tail, k - 1)), DIGITS) for k in looks)


def deep_critical(looks: Sequence[int], deep: int, alpha: float = ALPHA) -> float:
    """The deep chunks' own test: t quantile with deep - 1 df, at the looks' Bonferroni level
    (it is applied at every look, on the same chunks); 0 when there is no deep test."""
    if deep < 2:
        return 0.0
    return round(float(quantiles.t_isf(alpha / (2 * len(looks)), deep - 1)), DIGITS)


def job_correctness(settings: Any, policy: CorrectnessPolicy, seed: int) -> Correctness:
    """The job's correctness section from the profile's settings and the policy's margins.
    `looks` count windows; the critical values are for the chunks they cut into (segments.py)."""
    first = settings.windows + settings.long_windows
    looks = sorted({first, *(k for k in settings.looks if k > first)})
    chunks = chunk_looks(settings, looks)
    return Correctness(
        score_argv=list(settings.score_argv), reference_argv=list(settings.reference_argv),
        seed=seed, windows=settings.windows, window_tokens=settings.window_tokens,
        topk=settings.topk, model=settings.model, timeout_s=settings.timeout_s,
        looks=looks, critical=critical_values(chunks), alpha=ALPHA, margin=policy.margin,
        kl_margin=policy.kl_margin, long_windows=settings.long_windows,
        long_window_tokens=settings.long_window_tokens, floors=dict(settings.floors or {}),
        tie_nats=settings.tie_nats, max_mismatch=settings.max_mismatch, path=settings.path,
        tokenize_argv=list(settings.tokenize_argv), guards=list(settings.guards),
        long_score_tokens=settings.long_score_tokens, long_scored=settings.long_scored,
        deep_critical=deep_critical(looks, deep_chunks(settings)),
        drift=correctness_drift.rule(looks, dict(settings.floors or {}), policy))


def decide(section: dict[str, Any] | None, policy: CorrectnessPolicy) -> dict[str, Any]:
    if section is None:
        return {"decision": "not-scored", "reasons": ["the profile scores no correctness"]}
    rule = section.get("rule") or _legacy_rule(section)
    replay = _replay(section, rule, policy)
    looks, final = replay["looks"], replay["final"]
    out: dict[str, Any] = {
        **summary(section["chunks"][: looks[-1]["chunks"]], final["critical"]),
        "seed": section["seed"], "path": section["path"], "tail": section.get("tail", ""),
        "corpus_version": section.get("corpus_version"), "model": section.get("model"),
        "looks": [{"chunks": lk["chunks"], "tokens": lk["tokens"], "decision": lk["decision"]}
                  for lk in looks],
        "margin": policy.margin, "kl_margin": policy.kl_margin, "reasons": [],
    }
    if final.get("deep"):
        out["deep"] = final["deep"]
    if section.get("depths"):
        out["depths"] = section["depths"]
    out["mcnemar_p"] = mcnemar_worse(out["discordant"]["head_only_right"],
                                     out["discordant"]["base_only_right"])
    out["consistency"] = _consistency(section.get("consistency") or {}, out["reasons"])
    if out["consistency"]["head_mismatch"]:
        out["decision"] = "reject"
    elif section["identical"]:
        out["decision"] = "inert"
        out["reasons"].append("head's log-probabilities equal base's bit for bit")
    else:
        out["decision"] = _paired(out, final["decision"], policy)
    _floors(out, section.get("floors") or {}, replay["main"], policy)
    out["notes"] = _notes(section, out)
    return out


def _notes(section: dict[str, Any], out: dict[str, Any]) -> list[str]:
    """Lines for the comment: llama-perplexity's tail figures, and how deep windows reached."""
    notes = []
    tails = out.get("tails") or {}
    if all(tails.get(s, {}).get("max") is not None for s in ("base", "head")):
        notes.append("KL(reference ‖ engine) per token, 99th / 99.9th percentile / max: " + "; ".join(
            f"{name} {tails[s]['p99']:.3g} / {tails[s]['p999']:.3g} / {tails[s]['max']:.3g}"
            for s, name in (("base", "main"), ("head", "PR"))))
    for row in (section.get("consistency") or {}).get("unchecked") or []:
        notes.append(f"speed/score consistency not checked for {row['key']}: {row['reason']}")
    depths = section.get("depths")
    if depths:
        longs = len({window_key(c) for c in section["chunks"] if c.get("kind") == "deep"})
        how = ("their last positions scored after the score command's fill of the rest"
               if section.get("long_scored") == "deep" else "scored at every position")
        notes.append(f"long context: {longs} window(s) {how}, their deepest judged alone at "
                     f"depths {depths['min']:,} to {depths['max']:,} tokens")
    return notes


def _legacy_rule(section: dict[str, Any]) -> dict[str, Any]:
    """Results written before the growth rule: one look over every chunk."""
    k = len(section["chunks"])
    return {"looks": [k], "critical": critical_values([k]), "alpha": ALPHA}


def _replay(section: dict[str, Any], rule: dict[str, Any],
            policy: CorrectnessPolicy) -> dict[str, Any]:
    """Recompute the harness's looks from the chunks (they must agree), then the final look
    over every scored chunk under this policy's margins (a re-grade may change them)."""
    alpha = float(rule.get("alpha", ALPHA))  # the level the harness ran with (older: 0.01)
    counts = rule.get("chunk_looks") or rule["looks"]  # older results: a window was a chunk
    expected = critical_values(counts, alpha)
    if any(abs(a - b) > 1e-6 for a, b in zip(expected, rule["critical"], strict=True)):
        raise ResultsError("correctness: recorded critical values do not match the rule")
    deep = float(rule.get("deep_critical") or 0.0)
    chunks = section["chunks"]
    n_deep = sum(1 for c in chunks if c.get("kind") == "deep")
    if abs(deep - deep_critical(counts, n_deep, alpha)) > 1e-6 and deep:
        raise ResultsError("correctness: the recorded deep critical value does not match the "
                           f"{n_deep} deep chunks")
    if n_deep >= 2 and not deep:
        raise ResultsError("correctness: deep chunks recorded without their own test")
    if len(chunks) not in counts:
        raise ResultsError(f"correctness: {len(chunks)} chunks is not a look of {counts}")
    margin = rule.get("margin", policy.margin)
    kl_margin = rule.get("kl_margin", policy.kl_margin)
    replayed = sequential(chunks, counts, rule["critical"], margin, kl_margin, alpha, deep)
    main = _main(section, rule, counts)
    # the harness scores on while the head's verdict or main's drift test is undecided
    told = counts[max(len(replayed) - 1, main["look"])]
    if told != len(chunks):
        raise ResultsError("correctness: chunks scored past the look that decided")
    recorded = section.get("looks")
    if recorded is not None and \
            [lk["decision"] for lk in recorded] != [lk["decision"] for lk in replayed]:
        raise ResultsError(f"correctness: recorded looks {[lk['decision'] for lk in recorded]} "
                           f"disagree with the replay {[lk['decision'] for lk in replayed]}")
    final = look(chunks[: replayed[-1]["chunks"]], rule["critical"][len(replayed) - 1],
                 policy.margin, policy.kl_margin, ALPHA, deep)
    return {"looks": replayed, "final": final, "main": main}


def _main(section: dict[str, Any], rule: dict[str, Any], counts: Sequence[int]) -> dict[str, Any]:
    """Main's drift: the look that told and whether it drifted, with main's level there (rules
    with a `drift` test, replayed look by look); else (older results) judged once, on every
    chunk scored."""
    chunks = section["chunks"]
    if not rule.get("drift"):
        level = correctness_drift.legacy(chunks, bool(section.get("floors")))
        return {"look": 0, "level": level}
    correctness_drift.check_rule(rule["drift"], rule["looks"])
    j, status = correctness_drift.replay(section, counts)
    level = correctness_drift.drift.main_level(chunks[: counts[j]], rule["drift"]["critical"][j])
    return {"look": j, "level": level, "drift": status == "drift",
            "floors": {"top1": rule["drift"]["top1"], "kl": rule["drift"]["kl"]}}


def _paired(out: dict[str, Any], decision: str, policy: CorrectnessPolicy) -> str:
    top1, kl = out["diff_top1"], out["diff_kl"]
    if decision == "reject":
        deep = out.get("deep") or {}
        if deep.get("reject"):
            d1 = deep["diff_top1"]
            out["reasons"].append(
                f"at depth {_depth_text(out)}, alone: top-1 {100 * d1['mean']:+.2f} points "
                f"against main (interval {100 * d1['lo']:+.2f} to {100 * d1['hi']:+.2f}, "
                f"{deep['tokens']} tokens), KL {deep['diff_kl']['mean']:+.4f} (interval "
                f"{deep['diff_kl']['lo']:+.4f} to {deep['diff_kl']['hi']:+.4f}), beyond the "
                f"margins (McNemar p = {deep['mcnemar_p']:.2g})")
        if top1["hi"] < -policy.margin:
            out["reasons"].append(
                f"top-1 agreement fell {-100 * top1['mean']:.2f} points against main (interval "
                f"{100 * top1['lo']:+.2f} to {100 * top1['hi']:+.2f}), beyond the "
                f"{100 * policy.margin:g}-point margin (McNemar p = {out['mcnemar_p']:.2g})")
        if kl["lo"] > policy.kl_margin:
            out["reasons"].append(f"mean KL rose by {kl['mean']:.4f} against main (interval "
                                  f"{kl['lo']:+.4f} to {kl['hi']:+.4f}), beyond {policy.kl_margin}")
        return "reject"
    if decision == "pass":
        return "pass"
    out["reasons"].append(f"head against main still undecided after {out['tokens']} tokens "
                          "(the cap): not a REJECT")
    return "inconclusive"


def _depth_text(out: dict[str, Any]) -> str:
    depths = out.get("depths") or {}
    return f"{depths['min']:,}+" if depths.get("min") else "the deep positions"


def _floors(out: dict[str, Any], floors: dict[str, float], main: dict[str, Any],
            policy: CorrectnessPolicy) -> None:
    """Floors judge the PR only when main clears them, and only where head is worse than main.
    Main's drift (evalbot/grading/correctness_drift.py) stops the evaluation: judged by its
    one-sided bound (its whole two-sided interval beyond the floor let a main 15 points down
    pass in half the PRs), look by look under the sequential rule."""
    top1_floor = floors.get("top1", policy.top1_floor)
    kl_ceiling = floors.get("kl", policy.kl_ceiling)
    out["floors"] = {"top1": top1_floor, "kl": kl_ceiling, "calibrated": bool(floors)}
    base = main["level"]
    head = out["head"]
    drifted = main["drift"] if "drift" in main else (
        base["top1"]["hi"] < top1_floor or base["kl"]["lo"] > kl_ceiling)
    if "drift" in main:  # the harness told it against the job's floors
        top1_floor, kl_ceiling = main["floors"]["top1"], main["floors"]["kl"]
    if drifted:
        out["drift"] = True
        out["reasons"].append(
            f"the reference is unusable: main itself is below the floors (top-1 "
            f"{base['top1']['mean']:.4f}, at most {base['top1']['hi']:.4f}, vs {top1_floor}; KL "
            f"{base['kl']['mean']:.4f}, at least {base['kl']['lo']:.4f}, vs {kl_ceiling}; "
            f"{base['windows']} windows; reference {out.get('corpus_version')}, path: "
            f"{out['path']}); no correctness verdict is possible until the reference or the "
            "floors are fixed")
        if out["decision"] != "reject" or not out["consistency"]["head_mismatch"]:
            out["decision"] = "infra-error"  # only the PR's own speed/score mismatch stands
        return
    out["drift"] = False
    # The margin applies to the floors as to the paired rule: a head that trails main by less
    # than the margin is never REJECTed through a floor main sits on.
    below = head["top1"]["hi"] < top1_floor - policy.margin and out["diff_top1"]["hi"] < 0
    above = head["kl"]["lo"] > kl_ceiling + policy.kl_margin and out["diff_kl"]["lo"] > 0
    if out["decision"] != "reject" and (below or above):
        out["decision"] = "reject"
        out["reasons"].append(
            f"head is below the absolute floors less the margins (top-1 "
            f"{head['top1']['mean']:.4f} vs {top1_floor} − {policy.margin:g}, KL "
            f"{head['kl']['mean']:.4f} vs {kl_ceiling} + {policy.kl_margin:g}) while main "
            "clears them")


def _consistency(section: dict[str, Any], reasons: list[str]) -> dict[str, Any]:
    """Greedy tokens of the timed decode against the score run's argmax, per cell and side."""
    tie, allowed = section.get("tie_nats", 0.0), section.get("max_mismatch", 0.0)
    rows = []
    for cell in section.get("cells", []):
        gaps = cell["gaps"]
        bad = sum(1 for g in gaps if g is None or g > tie)
        rows.append({"key": cell["key"], "side": cell["side"], "compared": len(gaps),
                     "mismatches": bad, "failed": bool(inconsistent(gaps, tie, allowed))})
    failed = {(r["side"], r["key"]) for r in rows if r["failed"]}
    head_bad = sorted(k for s, k in failed if s == "head")
    if head_bad:
        also = " (main mismatches too: the score command does not run the benchmarked path)" \
            if any(s == "base" for s, _ in failed) else ""
        reasons.append(f"speed/score mismatch: the greedy tokens of the timed decode in "
                       f"{', '.join(head_bad)} differ from what the score run predicts{also}")
    return {"checked": bool(section.get("checked")), "note": section.get("note", ""),
            "cells": rows, "head_mismatch": bool(head_bad),
            "base_mismatch": any(s == "base" for s, _ in failed)}


def calibrate_floors(sections: Sequence[dict[str, Any]], policy: CorrectnessPolicy,
                     ) -> dict[str, float]:
    """Floors for one model and configuration from main's own scores (base side of A/A or
    ordinary evaluations): main's lowest top-1 lower bound and main's highest KL upper bound
    (the rule adds the margins when it applies them). Put the result in the profile's
    correctness.floors."""
    if not sections:
        raise ValueError("calibrating floors needs at least one scored evaluation of main")
    tops, kls = [], []
    for section in sections:  # the bounds of the drift test, clustered by window
        level = correctness_drift.legacy(section["chunks"], calibrated=True)
        tops.append(level["top1"]["lo"])
        kls.append(level["kl"]["hi"])
    return {"top1": round(max(min(tops), 0.0), 4), "kl": round(max(kls), 4)}
