"""Simulated PRs through the REAL correctness guard, on the shipped profiles' exact settings.

    python bench/guard_quality.py [--inert 1000] [--sims 300] [--seed 1] [--profile NAME|PATH]

Schedule: the job the bot sends for the profile (evalbot.grading.correctness_policy.job_correctness:
windows, window length, long windows, looks, critical values, the deep test's critical value),
cut into chunks by the harness's own engine.contract.shared.segments (a long window in deep pieces of its
last long_score_tokens positions, and, unless the profile says `long_scored: deep`, its shallow
positions in pieces of window_tokens).
Each evaluation scores in growing looks with engine.contract.shared.correctness_stats.look, stopping when
decided or bit-identical, as the harness does; the verdict is correctness_policy.decide on the
recorded section (policy `default`), and the guard rows go through the real grade().

Model (token level, per chunk of n positions):
- main's top-1 against the reference: a level per scored window ~ Beta(mean 0.89, sd 0.10) (the
  pieces of one long window share it; 3.2 points of seed spread), each piece's count binomial;
- main's per-token KL: lognormal around a per-window level (mean 0.03, sd 0.05 per token);
- an honest head whose numerics differ at bf16 level: discordant tokens at rate `disc` x
  Exponential(1) per chunk, split evenly (head-only-right = main-only-right), its own KL draws
  around the same level;
- damage: main-only-right flips at the damage rate on the chunks hit; a head is bit-identical
  to main on every chunk without damage or discordance (so "identical in round one" ends scoring
  exactly when the damage missed everything scored). Three ways it can fall:
  - "deep": every deep chunk (a loss confined to depth >= 32k);
  - "chunk": each chunk with probability 1/5 on its own (damage that fires on some input text:
    a long window's shallow pieces are 129 windows' worth of corpus text);
  - "window": each scored window, short or long, whole with probability 1/5 (a fault tied to a
    window's start, cache or prompt: all pieces of a damaged long window lose, none of an
    undamaged one). The loss in a damaged window is the PR's mean loss / (1/5), so the PR loses
    that much top-1 on average over the positions scored, however they are split between short
    and long windows; long windows holding most positions dilute the short windows' damage.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import beta as beta_dist

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evalbot.engine.contract.shared import drift  # noqa: E402
from evalbot.engine.contract.shared.correctness_stats import look  # noqa: E402
from evalbot.engine.contract.shared.segments import chunk_looks, long_pieces  # noqa: E402
from evalbot.evaluation.profile import load_profile  # noqa: E402
from evalbot.grading import correctness_drift  # noqa: E402
from evalbot.grading.correctness_policy import ALPHA, calibrate_floors, decide, job_correctness  # noqa: E402
from evalbot.grading.grade import grade  # noqa: E402
from evalbot.grading.policy import CorrectnessPolicy, Policy, load_labels  # noqa: E402

# main's top-1 per scored window; an evaluation's mean over its 10 windows then spreads by
# 0.10 / sqrt(10) = 3.2 points from seed to seed (the 3-4 points measured)
BASE_MEAN, BASE_SD = 0.89, 0.10
KL_MEAN, KL_SD = 0.03, 0.05
CALIBRATION_RUNS = 30  # evaluations of main the floors are calibrated from
DAMAGED_SHARE = 0.2  # "one in five": the chance a chunk or window is damaged
LOSS = 0.03  # the PR's mean top-1 loss in the one-in-five rows: 15 points where damaged
SHOWN = ("inert", "pass", "inconclusive", "infra-error")  # the decisions a row's shares count


@dataclass(frozen=True)
class Schedule:
    name: str
    looks: list[int]  # chunks per look
    critical: list[float]
    deep_critical: float
    kinds: list[str]  # per chunk, in scoring order
    windows: list[int]  # the scored window each chunk is cut from
    positions: np.ndarray
    window_looks: list[int]  # windows per look (the job's correctness looks)


def schedule(profile: str, policy: CorrectnessPolicy) -> Schedule:
    spec = job_correctness(load_profile(profile).correctness, policy, seed=0)
    kinds, windows, sizes = [], [], []
    for w in range(spec.long_windows):
        for kind, a, b in long_pieces(spec):
            kinds.append(kind), windows.append(w), sizes.append(b - a)
    for w in range(spec.looks[-1] - spec.long_windows):
        kinds.append("short"), windows.append(spec.long_windows + w)
        sizes.append(spec.window_tokens - 1)
    return Schedule(profile, chunk_looks(spec, spec.looks), spec.critical, spec.deep_critical,
                    kinds, windows, np.array(sizes), list(spec.looks))


@dataclass(frozen=True)
class Case:
    name: str
    disc: float = 0.0  # honest discordance rate (bf16-level numerics)
    drop: float = 0.0  # top-1 points lost where damaged
    where: str = ""  # "deep", "chunk" or "window": what the damage falls on (module docstring)
    main_top1: float = 0.0  # main's shift against the reference (drift)
    main_kl: float = 0.0
    kl_rise: float = 0.0  # head's per-token KL rise (same top-1)
    tilt: float = 0.0  # sd of a per-window top-1 effect of the head (mean 0: still honest)


def simulate(rng: np.random.Generator, plan: Schedule, case: Case, policy: CorrectnessPolicy,
             floors: dict[str, float], drift_test: bool = True) -> dict[str, Any]:
    """One evaluation: growing looks as the harness runs them; the recorded section. Without
    `drift_test` (the sections a maintainer calibrates floors on, before there are floors),
    scoring stops with the head's verdict, main's drift judged once on what it scored."""
    n, k = plan.positions, plan.positions.size
    level = rng.beta(*_beta(BASE_MEAN, BASE_SD), size=max(plan.windows) + 1)
    p = np.clip(level[plan.windows] + case.main_top1, 0.01, 0.999)
    base = rng.binomial(n, p)
    half = np.clip(case.disc * rng.exponential(1.0, k) / 2, 0, 0.45)
    extra = np.where(damaged(rng, plan, case.where), case.drop, 0.0)
    # head can be right only where main is wrong and the reverse: rates of those tokens that
    # give `half` (+ the damage) of all positions, so neither side is favoured by clipping
    half = np.minimum(half, 0.9 * (1 - p))  # no more flips than main has wrong tokens
    # an honest head may fare a little better on one window's text and worse on another's:
    # the pieces of a long window share that effect, so they are not independent clusters
    tilt = rng.normal(0.0, case.tilt, max(plan.windows) + 1)[plan.windows] if case.tilt else 0
    head_only = rng.binomial(n - base, np.clip((half - tilt / 2) / (1 - p), 0, 0.99))
    base_only = rng.binomial(base, np.clip((half + tilt / 2 + extra) / p, 0, 0.99))
    kl_level = KL_MEAN * rng.lognormal(-0.125, 0.5, max(plan.windows) + 1)[plan.windows]
    chunks, looks, same = [], [], True
    rule = correctness_drift.rule(plan.window_looks, floors, policy)  # the harness's, per look
    paired, main, told = "", "undecided", []
    for j, (count, crit) in enumerate(zip(plan.looks, plan.critical, strict=True)):
        for i in range(len(chunks), count):
            bk = _kl(rng, kl_level[i] + case.main_kl, int(n[i]))
            changed = bool(head_only[i] or base_only[i] or half[i] or case.kl_rise)
            hk = _kl(rng, kl_level[i] + case.main_kl, int(n[i])) + case.kl_rise if changed else bk
            same = same and not changed
            chunks.append({"window": plan.windows[i], "kind": plan.kinds[i],
                           "positions": int(n[i]), "base_top1": int(base[i]),
                           "head_top1": int(base[i] + head_only[i] - base_only[i]),
                           "head_only_right": int(head_only[i]),
                           "base_only_right": int(base_only[i]), **_sums(bk, hk)})
        if not paired:  # as engine/scoring/correctness.py: the head's verdict, then main's drift
            looks.append(look(chunks, crit, policy.margin, policy.kl_margin, ALPHA,
                              plan.deep_critical))
            paired = "done" if same or looks[-1]["decision"] != "undecided" else ""
        if main == "undecided":
            main = drift.status(chunks, rule, j) if drift_test else "clear"
            told.append({"chunks": len(chunks), "status": main})
        if paired and main != "undecided":
            break
    return {"seed": 0, "path": "simulated", "identical": same, "chunks": chunks,
            "looks": looks, "drift_looks": told, "model": plan.name, "floors": floors,
            "rule": {"looks": plan.window_looks, "chunk_looks": plan.looks,
                     "critical": plan.critical, "deep_critical": plan.deep_critical,
                     "alpha": ALPHA, "margin": policy.margin, "kl_margin": policy.kl_margin,
                     **({"drift": rule} if drift_test else {})}}


def damaged(rng: np.random.Generator, plan: Schedule, where: str) -> np.ndarray:
    """Per chunk: whether the damage falls on it (module docstring)."""
    if where == "deep":
        return np.array([kind == "deep" for kind in plan.kinds])
    if where == "chunk":
        return rng.random(len(plan.kinds)) < DAMAGED_SHARE
    if where == "window":
        return (rng.random(max(plan.windows) + 1) < DAMAGED_SHARE)[plan.windows]
    return np.zeros(len(plan.kinds), bool)


def _beta(mean: float, sd: float) -> tuple[float, float]:
    k = mean * (1 - mean) / sd**2 - 1
    return mean * k, (1 - mean) * k


def _kl(rng: np.random.Generator, level: float, n: int) -> np.ndarray:
    sigma = np.sqrt(np.log(1 + (KL_SD / KL_MEAN) ** 2))
    return level * np.exp(sigma * rng.standard_normal(n) - sigma**2 / 2)


def _sums(bk: np.ndarray, hk: np.ndarray) -> dict[str, float]:
    d = hk - bk
    return {"base_kl_sum": float(bk.sum()), "head_kl_sum": float(hk.sum()),
            "base_kl_sq_sum": float(bk @ bk), "head_kl_sq_sum": float(hk @ hk),
            "kl_diff_sum": float(d.sum()), "kl_diff_sq_sum": float(d @ d)}


def guard_headline(section: dict[str, Any], guard: dict[str, Any], policy: Policy) -> str:
    """The real grade() of an evaluation whose scored model is inert and whose guard model's
    section is `guard`: its headline and the guard model's label."""
    models = [{"name": "scored", "role": "primary", "namespace": "eval-a"},
              {"name": "guard", "role": "primary", "namespace": "eval-b"}]
    results = {"schema": "evalbot.results/1", "job_id": "j", "profile": "sim", "box": {},
               "base": {"sha": "a" * 40, "ok": True}, "head": {"sha": "b" * 40, "ok": True},
               "rule": {"looks": [2], "critical": [1.0], "sd_floor": 0.1}, "models": models,
               "cells": [], "failures": [], "correctness": {**section, "model": "scored"},
               "correctness_guards": [{**guard, "model": "guard"}]}
    verdict = grade(results, policy)
    return f"{verdict['headline']} {verdict['models'][1]['label']}"


CASES = [  # (case, what the row counts, what it should be)
    (Case("inert head (bit-identical)"), "reject", False),
    (Case("honest head, bf16-level, 2% discordant", disc=0.02), "reject", False),
    (Case("honest head, bf16-level, 10% discordant", disc=0.10), "reject", False),
    (Case("honest head, 10% discordant, +-0.3 pt per window (sd)", disc=0.10, tilt=0.003),
     "reject", False),
    (Case("5 pt lost at depth >= 32k only", drop=0.05, where="deep"), "reject", True),
    (Case("10 pt lost at depth >= 32k only", drop=0.10, where="deep"), "reject", True),
    (Case("20 pt lost at depth >= 32k only", drop=0.20, where="deep"), "reject", True),
    (Case("3 pt lost in 1 chunk in 5 (15 pt there), identical elsewhere",
          drop=LOSS / DAMAGED_SHARE, where="chunk"), "reject", True),
    (Case("3 pt lost in 1 chunk in 5, 2% discordant elsewhere", disc=0.02,
          drop=LOSS / DAMAGED_SHARE, where="chunk"), "reject", True),
    (Case("3 pt lost in 1 window in 5, short or long, whole (15 pt there), identical elsewhere",
          drop=LOSS / DAMAGED_SHARE, where="window"), "reject", True),
    (Case("3 pt lost in 1 window in 5, short or long, whole, 2% discordant elsewhere",
          disc=0.02, drop=LOSS / DAMAGED_SHARE, where="window"), "reject", True),
    (Case("+0.05 nat KL, same top-1", kl_rise=0.05), "reject", True),
    (Case("main at its calibrated level, inert head"), "drift", False),
    (Case("main drifted: top-1 -15 pt, KL +1", main_top1=-0.15, main_kl=1.0), "drift", True),
]


@dataclass(frozen=True)
class Rate:
    """One row's outcome: how many runs hit (REJECT, or drift flagged), each decision's share,
    and the positions scored per side (mean)."""
    runs: int
    hits: int
    shares: dict[str, float]
    tokens: float
    rejected: int = 0  # runs whose decision was a REJECT


def rate(plan: Schedule, case: Case, counts: str, runs: int, policy: CorrectnessPolicy,
         rng: np.random.Generator, floors: dict[str, float]) -> Rate:
    """`runs` simulated PRs of `case`, each decided by the real correctness_policy.decide."""
    sections = [simulate(rng, plan, case, policy, floors) for _ in range(runs)]
    verdicts = [decide(s, policy) for s in sections]
    hits = sum((v["decision"] == "reject") if counts == "reject" else bool(v.get("drift"))
               for v in verdicts)
    shares = {d: sum(v["decision"] == d for v in verdicts) / runs for d in SHOWN}
    tokens = float(np.mean([sum(c["positions"] for c in s["chunks"]) for s in sections]))
    return Rate(runs, hits, shares, tokens, sum(v["decision"] == "reject" for v in verdicts))


def rows(plan: Schedule, policy: Policy, rng: np.random.Generator, inert: int, sims: int,
         floors: dict[str, float]) -> None:
    for case, counts, bad in CASES:
        got = rate(plan, case, counts, inert if not bad else sims, policy.correctness, rng, floors)
        shares = " / ".join(f"{100 * got.shares[d]:.1f}" for d in SHOWN)
        _print(case.name, counts if not bad else f"{counts} (detection)", got.runs, got.hits,
               bad, shares, f"{got.tokens:,.0f}")
    _guard_rows(plan, policy, rng, sims, floors)
    _drift_rows(plan, policy, rng, sims, floors)


def _guard_rows(plan: Schedule, policy: Policy, rng: np.random.Generator, sims: int,
                floors: dict[str, float]) -> None:
    corr = policy.correctness
    guard_cases = [("guard model inconclusive (head 1 pt down: at the margin)",
                    Case("", disc=0.10, drop=0.05, where="chunk"), "eval:inconclusive",
                    "eval-b:inconclusive"),
                   ("guard model infra-error (its main drifted)",
                    Case("", main_top1=-0.15, main_kl=1.0), "eval:infra-error",
                    "eval-b:infra-error")]
    for name, case, want, label in guard_cases:
        hits = shown = 0
        for _ in range(sims):
            guard = simulate(rng, plan, case, corr, floors)
            if decide(guard, corr)["decision"] not in ("inconclusive", "infra-error"):
                continue
            shown += 1
            hits += guard_headline(simulate(rng, plan, CASES[0][0], corr, floors), guard,
                                   policy) == f"{want} {label}"
        _print(name, f"{want} + {label}", shown, hits, True, f"{shown} of {sims} ended so", "")


DRIFTS = (0.02, 0.03, 0.04, 0.05, 0.06)  # main's top-1 this far under its calibrated floor


def _drift_rows(plan: Schedule, policy: Policy, rng: np.random.Generator, sims: int,
                floors: dict[str, float]) -> None:
    """Main drifted under its calibrated floor, the head inert (bit-identical to main): drift
    must stop the run (infra-error), never REJECT the head; the smallest drift caught in 95%."""
    corr, caught, rejected, runs = policy.correctness, None, 0, 0
    for below in DRIFTS:
        case = Case(f"main {100 * below:g} pt under its calibrated floor, inert head",
                    main_top1=floors["top1"] - below - BASE_MEAN)
        got = rate(plan, case, "drift", sims, corr, rng, floors)
        shares = " / ".join(f"{100 * got.shares[d]:.1f}" for d in SHOWN)
        _print(case.name, "drift (detection)", got.runs, got.hits, True, shares,
               f"{got.tokens:,.0f}")
        rejected += got.rejected
        runs += got.runs
        if caught is None and got.hits >= 0.95 * got.runs:
            caught = below
    print(f"| smallest drift caught in >= 95% (of {DRIFTS}) | {caught and f'{100 * caught:g} pt'} "
          f"| | | | inert heads REJECTed through a drifted main: {rejected} of {runs} | |")


def _print(name: str, counts: str, runs: int, hits: int, bad: bool, dist: str,
           tokens: str) -> None:
    if bad:
        bound = 0.0 if hits == 0 else float(beta_dist.ppf(0.05, hits, runs - hits + 1))
        shown = f"≥{100 * bound:.2f}%"
    else:
        bound = 1.0 if hits == runs else float(beta_dist.ppf(0.95, hits + 1, runs - hits))
        shown = f"≤{100 * bound:.2f}%"
    print(f"| {name} | {counts} | {runs} | {100 * hits / max(runs, 1):.2f}% | {shown} | "
          f"{dist} | {tokens} |", flush=True)


def calibrated(plan: Schedule, policy: CorrectnessPolicy, rng: np.random.Generator
               ) -> dict[str, float]:
    """Floors as a maintainer calibrates them: calibrate_floors on main's own sections."""
    mains = [simulate(rng, plan, CASES[0][0], policy, {}, drift_test=False)
             for _ in range(CALIBRATION_RUNS)]
    return calibrate_floors(mains, policy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inert", type=int, default=1000, help="runs per no-damage row")
    parser.add_argument("--sims", type=int, default=300, help="runs per damage row")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="append",
                        help="profile name or YAML path (repeatable); default: llamacpp and "
                             "sparkinfer")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    policy = load_labels(ROOT / "labels.yaml").policy("default")
    started = time.time()
    print(f"policy default: margin {100 * policy.correctness.margin:g} pt top-1, KL margin "
          f"{policy.correctness.kl_margin}; alpha {ALPHA} split over the looks. One in five: "
          f"{100 * LOSS / DAMAGED_SHARE:g} pt lost where damaged, {100 * LOSS:g} pt on average")
    for name in args.profile or ["llamacpp", "sparkinfer"]:
        plan = schedule(name, policy.correctness)
        floors = calibrated(plan, policy.correctness, rng)
        windows = [len(set(plan.windows[:k])) for k in plan.looks]
        print(f"\n### profile {name}: looks {windows} windows, {plan.looks} chunks "
              f"({sum(plan.positions[:plan.looks[0]]):,}..{plan.positions.sum():,} tokens per side), "
              f"{plan.kinds.count('deep')} deep chunks, deep critical {plan.deep_critical}; "
              f"floors calibrated from {CALIBRATION_RUNS} mains: {floors}\n")
        print("| simulated PR | counts | runs | rate | 95% bound | inert / pass / inconcl. / "
              "infra % | tokens mean |")
        print("|---|---|---:|---:|---:|---|---:|")
        rows(plan, policy, rng, args.inert, args.sims, floors)
    print(f"\n{time.time() - started:.0f} s. Rate: REJECT (or drift flagged, or the guard's "
          "headline and label) per run; 95% bound: one-sided Clopper-Pearson (lower for "
          "detection rows, upper for the others).")


if __name__ == "__main__":
    main()
