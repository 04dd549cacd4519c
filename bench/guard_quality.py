"""Simulated PRs through the REAL correctness decision, on the shipped profiles' schedules.

    python bench/guard_quality.py [--sims 600] [--logit-sims 600] [--seed 1] [--profile NAME]

Each simulated evaluation scores windows in growing looks exactly as the harness does, with the
schedule the bot sends for that profile (evalbot.grading.correctness_policy.job_correctness: windows,
window length, long windows and their scored tail, looks, critical values): after every look
it applies engine.scoring.correctness_stats.look and stops once decided; the final decision is
evalbot.grading.correctness_policy.decide on the recorded section, under the `default` policy.

Scenarios:
- token level: main's per-window top-1 p_i ~ Beta(mean 0.94, sd 0.02); head-vs-main flips at a
  discordance level, clustered (window rate level * Exponential(1)), split evenly.
- clustered damage: a PR worse by x points adds main-only-right flips at rate x * Exponential(1)
  per window (the damage clusters in windows, as the flips do).
- concentrated damage, harsher: the drop falls on one window in five (5x the mean drop there),
  the rest are untouched: a kernel bug that fires only on some inputs.
- logit level: per position 32 candidate logits (sd 2) plus a rest of 15% of the mass spread
  over the vocabulary; reference, main and PR dumps are the real top-k of those, KL is the real
  engine.scoring.correctness_stats.kl_arrays, top-1 the real argmax agreement. Logit noise is Gaussian
  per candidate; "+0.05 nat" moves top mass into the rest so that the true KL rises by 0.05
  with every argmax unchanged.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.stats import beta as beta_dist

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.scoring.correctness_stats import kl_arrays, kl_histogram, look  # noqa: E402
from evalbot.evaluation.profile import load_profile  # noqa: E402
from evalbot.grading.correctness_policy import ALPHA, decide, job_correctness  # noqa: E402
from evalbot.grading.policy import CorrectnessPolicy, load_labels  # noqa: E402

BASE_MEAN, BASE_SD = 0.94, 0.02  # the existing bot's stored results
KL_MEAN, KL_SD = 0.03, 0.05  # per token, main and head alike (token-level scenarios)
CANDIDATES, CAND_SD, REST = 32, 2.0, 0.15  # logit level: explicit candidates, rest mass


@dataclass(frozen=True)
class Schedule:
    name: str
    looks: list[int]
    critical: list[float]
    positions: list[int]  # scored positions of chunk j, in scoring order (long ones first)
    topk: int


def schedule(profile: str, policy: CorrectnessPolicy) -> Schedule:
    settings = load_profile(profile).correctness
    assert settings is not None
    spec = job_correctness(settings, policy, seed=0)
    long = spec.long_score_tokens or spec.long_window_tokens - 1
    positions = [long] * spec.long_windows + \
        [spec.window_tokens - 1] * (spec.looks[-1] - spec.long_windows)
    return Schedule(profile, spec.looks, spec.critical, positions, spec.topk)


def beta_params(mean: float, sd: float) -> tuple[float, float]:
    k = mean * (1 - mean) / sd**2 - 1
    return mean * k, (1 - mean) * k


def _row(i: int, n: int, sums: dict[str, Any]) -> dict[str, Any]:
    return {"window": i, "kind": "short", "positions": n, **sums}


def token_chunks(rng: np.random.Generator, n: np.ndarray, level: float, drop: float,
                 clustered: bool) -> list[dict[str, Any]]:
    """Chunks of the token-level model; `n` is the positions of each window."""
    k = n.size
    base = rng.binomial(n, rng.beta(*beta_params(BASE_MEAN, BASE_SD), size=k))
    half = np.clip(level * rng.exponential(1.0, k) / 2, 0, 0.45)
    if clustered:
        extra = np.where(rng.random(k) < 0.2, 5 * drop, 0.0)
    else:
        extra = drop * rng.exponential(1.0, k)
    extra = np.minimum(extra, 0.99 - 2 * half)
    head_only = rng.binomial(n, half)
    base_only = rng.binomial(n - head_only, (half + extra) / (1 - half))
    head = np.clip(base + head_only - base_only, 0, n)
    level_kl = KL_MEAN * rng.lognormal(-0.125, 0.5, k)
    sums: dict[str, np.ndarray] = {}
    for size in np.unique(n):  # one array per window length (long and short windows)
        rows = np.flatnonzero(n == size)
        bk, hk = (_kl_tokens(rng, level_kl[rows], int(size)) for _ in range(2))
        for key, value in _kl_sums(bk, hk, tails=False).items():
            sums.setdefault(key, np.zeros(k))[rows] = value
    return [_row(i, int(n[i]), {**{key: float(v[i]) for key, v in sums.items()},
                                "base_top1": int(base[i]), "head_top1": int(head[i]),
                                "head_only_right": int(head_only[i]),
                                "base_only_right": int(base_only[i])}) for i in range(k)]


def _kl_tokens(rng: np.random.Generator, level: np.ndarray, n: int) -> np.ndarray:
    """Heavy-tailed (lognormal) per-token KL around each window's level: [windows, n]."""
    sigma = np.sqrt(np.log(1 + (KL_SD / KL_MEAN) ** 2))
    return level[:, None] * np.exp(sigma * rng.standard_normal((level.size, n)) - sigma**2 / 2)


def _kl_sums(bk: np.ndarray, hk: np.ndarray, tails: bool = True) -> dict[str, Any]:
    """Chunk sums of per-token KL ([windows, n] arrays give one value per window)."""
    def total(x: np.ndarray) -> Any:
        return x.sum(-1)
    out = {"base_kl_sum": total(bk), "head_kl_sum": total(hk),
           "base_kl_sq_sum": total(bk**2), "head_kl_sq_sum": total(hk**2),
           "kl_diff_sum": total(hk - bk), "kl_diff_sq_sum": total((hk - bk) ** 2)}
    if tails:  # the percentile histograms: only the logit level shows them (they cost time)
        out.update(base_kl_max=float(bk.max()), head_kl_max=float(hk.max()),
                   base_kl_hist=kl_histogram(bk), head_kl_hist=kl_histogram(hk))
        out = {key: float(v) if isinstance(v, np.floating) else v for key, v in out.items()}
    return out


# ---- logit level -----------------------------------------------------------------------------
def _log_probs(logits: np.ndarray, rest_lp: np.ndarray) -> np.ndarray:
    """Candidates' log-probabilities when the rest holds exp(rest_lp) of the mass."""
    z = logits - logits.max(1, keepdims=True)
    lse = np.log(np.exp(z).sum(1, keepdims=True))
    return z - lse + np.log1p(-np.exp(rest_lp))[:, None]


def _dump(lp: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.argsort(-lp, 1, kind="stable")[:, :k]
    return idx, np.take_along_axis(lp, idx, 1)


def _moved_rest(kl_rise: float) -> float:
    """The rest mass R' that raises KL by `kl_rise` when the candidates shrink in proportion."""
    def rise(r: float) -> float:
        return float((1 - REST) * np.log((1 - REST) / (1 - r)) + REST * np.log(REST / r))
    return float(brentq(lambda r: rise(r) - kl_rise, REST + 1e-9, 0.999))


def logit_chunks(rng: np.random.Generator, n: np.ndarray, k: int, base_sd: float,
                 head_sd: float, kl_rise: float) -> list[dict[str, Any]]:
    """Chunks of the logit-level model: real dumps, real KL, real top-1."""
    out = []
    rest = np.log(REST)
    head_rest = np.log(_moved_rest(kl_rise)) if kl_rise else rest
    for i in range(n.size):
        ref = rng.normal(0.0, CAND_SD, (int(n[i]), CANDIDATES))
        sides = {"ref": _log_probs(ref, np.full(n[i], rest))}
        for side, sd, r in (("base", base_sd, rest), ("head", head_sd, head_rest)):
            noisy = ref + sd * rng.standard_normal(ref.shape)
            sides[side] = _log_probs(noisy, np.full(n[i], r))
        dumps = {s: _dump(lp, k) for s, lp in sides.items()}
        top = {s: d[0][:, 0] for s, d in dumps.items()}
        bk = kl_arrays(*dumps["ref"], *dumps["base"])
        hk = kl_arrays(*dumps["ref"], *dumps["head"])
        base_ok, head_ok = top["base"] == top["ref"], top["head"] == top["ref"]
        out.append(_row(i, int(n[i]), {
            **_kl_sums(bk, hk), "base_top1": int(base_ok.sum()), "head_top1": int(head_ok.sum()),
            "head_only_right": int((head_ok & ~base_ok).sum()),
            "base_only_right": int((base_ok & ~head_ok).sum())}))
    return out


# ---- one evaluation --------------------------------------------------------------------------
Chunks = Callable[[np.random.Generator, np.ndarray], list[dict[str, Any]]]


def evaluate(rng: np.random.Generator, policy: CorrectnessPolicy, plan: Schedule,
             make: Chunks) -> tuple[str, int, bool]:
    """The harness's growing looks on one simulated PR, then the grader's decision."""
    chunks: list[dict[str, Any]] = []
    looks = []
    for count, crit in zip(plan.looks, plan.critical, strict=True):
        chunks += make(rng, np.array(plan.positions[len(chunks):count]))
        looks.append(look(chunks, crit, policy.margin, policy.kl_margin, ALPHA))
        if looks[-1]["decision"] != "undecided":
            break
    section = {"seed": 0, "path": "simulated", "identical": False, "chunks": chunks,
               "looks": looks, "rule": {"looks": plan.looks, "critical": plan.critical,
                                        "alpha": ALPHA, "margin": policy.margin,
                                        "kl_margin": policy.kl_margin}}
    verdict = decide(section, policy)
    by_kl = any(r.startswith("mean KL rose") for r in verdict["reasons"])
    return verdict["decision"], looks[-1]["tokens"], by_kl


def scenarios(k: int) -> list[tuple[str, bool, Chunks]]:
    """(name, inert?, chunk maker); inert rows count REJECT as false, the others as detection."""
    out: list[tuple[str, bool, Chunks]] = []
    for lv in (0.02, 0.10, 0.20):
        out.append((f"token: equivalent, discordance {100 * lv:g}%", True,
                    lambda r, n, lv=lv: token_chunks(r, n, lv, 0.0, False)))
    for d in (0.02, 0.03):
        out.append((f"clustered: worse by {100 * d:g} pt, disc. 10%", False,
                    lambda r, n, d=d: token_chunks(r, n, 0.10, d, False)))
    for d in (0.02, 0.03, 0.05):
        out.append((f"concentrated: {100 * d:g} pt drop in 1/5 windows", False,
                    lambda r, n, d=d: token_chunks(r, n, 0.10, d, True)))
    out += [
        ("logit: noise 0.03 on both sides", True,
         lambda r, n: logit_chunks(r, n, k, 0.03, 0.03, 0.0)),
        ("logit: noise 0.10 on both sides", True,
         lambda r, n: logit_chunks(r, n, k, 0.10, 0.10, 0.0)),
        # Base bit-equal to the reference, head noisy: KL +3e-4 (far inside the margin), but in
        # this model 2% of head's argmaxes flip: a real top-1 loss beyond the 1-point margin.
        ("logit: base = ref, head noise 0.03", False,
         lambda r, n: logit_chunks(r, n, k, 0.0, 0.03, 0.0)),
        ("logit: +0.05 nat KL, same top-1", False,
         lambda r, n: logit_chunks(r, n, k, 0.01, 0.01, 0.05)),
    ]
    return out


def _bound(hits: int, n: int, upper: bool) -> float:
    """One-sided 95% Clopper-Pearson bound of a rate hits/n."""
    if upper:
        return 1.0 if hits == n else float(beta_dist.ppf(0.95, hits + 1, n - hits))
    return 0.0 if hits == 0 else float(beta_dist.ppf(0.05, hits, n - hits + 1))


def table(plan: Schedule, policy: CorrectnessPolicy, rng: np.random.Generator, sims: int,
          logit_sims: int) -> None:
    print(f"\n### profile {plan.name}: looks {plan.looks} windows, "
          f"{sum(plan.positions[:plan.looks[0]]):,}..{sum(plan.positions):,} tokens per side, "
          f"top-{plan.topk}\n")
    print("| simulated PR | sims | REJECT | 95% bound | by KL | pass | inconcl. | tokens mean | "
          "tokens p95 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, inert, make in scenarios(plan.topk):
        n = logit_sims if name.startswith("logit") else sims
        runs = [evaluate(rng, policy, plan, make) for _ in range(n)]
        decisions = [d for d, _, _ in runs]
        tokens = np.array([t for _, t, _ in runs])
        by_kl = sum(kl for d, _, kl in runs if d == "reject")
        rejects = decisions.count("reject")
        passed = sum(d in ("pass", "inert") for d in decisions)
        bound = _bound(rejects, n, upper=inert)
        print(f"| {name} | {n} | {100 * rejects / n:.2f}% | {'≤' if inert else '≥'}"
              f"{100 * bound:.2f}% | {100 * by_kl / n:.1f}% | {100 * passed / n:.1f}% | "
              f"{100 * decisions.count('inconclusive') / n:.1f}% | {tokens.mean():,.0f} | "
              f"{np.percentile(tokens, 95):,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sims", type=int, default=600)
    parser.add_argument("--logit-sims", type=int, default=600)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="append",
                        help="profile name (repeatable); default: llamacpp and sparkinfer")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    policy = load_labels(ROOT / "evalbot" / "labels.yaml").policy("default").correctness
    started = time.time()
    print(f"policy default: margin {100 * policy.margin:g} pt top-1, KL margin "
          f"{policy.kl_margin}; alpha {ALPHA} split over the looks")
    for name in args.profile or ["llamacpp", "sparkinfer"]:
        table(schedule(name, policy), policy, rng, args.sims, args.logit_sims)
    print(f"\n{time.time() - started:.0f} s. by KL: REJECTs the KL rule made (alone or with "
          "top-1). REJECT on an inert row (equivalent, equal noise, "
          "or a noise difference far below the KL margin) is a false REJECT, on the others a "
          "detection.\n95% bound: one-sided Clopper-Pearson (upper for inert rows, lower for "
          "the others). tokens: scored per side when the guard stopped.")


if __name__ == "__main__":
    main()
