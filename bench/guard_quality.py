"""Simulated PRs through the REAL correctness decision, beside the existing bot's rule.

    python bench/guard_quality.py [--sims 600] [--seed 1]

Each simulated evaluation scores windows of WINDOW tokens in growing looks (the schedule below),
exactly as the harness does: after every look it applies engine.correctness_stats.look and stops
once decided; the final decision is evalbot.correctness_policy.decide on the recorded section
(the grader's replay), under the `default` policy of labels.yaml.

Token model, per window (chunk): main's top-1 agreement p_i ~ Beta (mean 0.94, sd 0.02);
head-vs-main flips are clustered: the window's discordance rate is level * g_i with
g_i ~ Exponential(1) (a few windows carry most flips), split evenly between "head right, main
wrong" and the reverse; a PR worse by x points adds base-only flips at rate x * h_i,
h_i ~ Exponential(1) (its damage clusters too). Per-token KL is heavy-tailed and exchangeable
between head and main (KL never helps detection here, so top-1 carries it alone).

The existing bot: one window of 280 tokens, the PR alone, REJECT if its top-1 < 0.90 (main's
level varies by window as above).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import beta as beta_dist

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.correctness_stats import look  # noqa: E402
from evalbot.correctness_policy import ALPHA, critical_values, decide  # noqa: E402
from evalbot.policy import CorrectnessPolicy, load_labels  # noqa: E402

WINDOW = 256
LOOKS = [16, 32, 64, 128, 256]  # windows per look: 4k .. 64k tokens
LEVELS = [0.02, 0.05, 0.10, 0.20]
DROPS = [0.01, 0.02, 0.03]
BASE_MEAN, BASE_SD = 0.94, 0.02  # the existing bot's stored results
KL_MEAN, KL_SD = 0.03, 0.05  # per token, main and head alike


def beta_params(mean: float, sd: float) -> tuple[float, float]:
    k = mean * (1 - mean) / sd**2 - 1
    return mean * k, (1 - mean) * k


def simulate_chunks(rng: np.random.Generator, k: int, level: float, drop: float,
                    identical: bool) -> list[dict[str, Any]]:
    n = np.full(k, WINDOW)
    p = rng.beta(*beta_params(BASE_MEAN, BASE_SD), size=k)
    base = rng.binomial(n, p)
    if identical:
        head_only = base_only = np.zeros(k, dtype=int)
    else:
        half = np.clip(level * rng.exponential(1.0, k) / 2, 0, 0.45)
        extra = np.minimum(drop * rng.exponential(1.0, k), 0.99 - 2 * half)
        head_only = rng.binomial(WINDOW, half)
        base_only = rng.binomial(WINDOW - head_only, (half + extra) / (1 - half))
    head = np.clip(base + head_only - base_only, 0, WINDOW)
    level_kl = KL_MEAN * rng.lognormal(-0.125, 0.5, k)  # per-window level, shared by both
    base_kl = _kl_tokens(rng, level_kl)
    head_kl = base_kl if identical else _kl_tokens(rng, level_kl)
    sums = {"base_top1": base, "head_top1": head, "base_kl_sum": base_kl.sum(1),
            "head_kl_sum": head_kl.sum(1), "base_kl_sq_sum": (base_kl**2).sum(1),
            "head_kl_sq_sum": (head_kl**2).sum(1), "head_only_right": head_only,
            "base_only_right": base_only, "kl_diff_sum": (head_kl - base_kl).sum(1),
            "kl_diff_sq_sum": ((head_kl - base_kl) ** 2).sum(1)}
    columns = {key: value.tolist() for key, value in sums.items()}
    return [{"window": i, "kind": "short", "positions": WINDOW,
             **{key: column[i] for key, column in columns.items()}} for i in range(k)]


def _kl_tokens(rng: np.random.Generator, level: np.ndarray) -> np.ndarray:
    """Heavy-tailed (lognormal) per-token KL around each window's level: [windows, WINDOW]."""
    sigma = np.sqrt(np.log(1 + (KL_SD / KL_MEAN) ** 2))
    normal = rng.standard_normal((level.size, WINDOW), dtype=np.float32)
    return level.astype(np.float32)[:, None] * np.exp(np.float32(sigma) * normal
                                                      - np.float32(sigma**2 / 2))


def evaluate(rng: np.random.Generator, policy: CorrectnessPolicy, critical: list[float],
             level: float, drop: float, identical: bool) -> tuple[str, int]:
    """One evaluation: the harness's growing looks, then the grader's decision."""
    chunks: list[dict[str, Any]] = []
    looks = []
    for count, crit in zip(LOOKS, critical, strict=True):
        chunks += simulate_chunks(rng, count - len(chunks), level, drop, identical)
        looks.append(look(chunks, crit, policy.margin, policy.kl_margin, ALPHA))
        if identical or looks[-1]["decision"] != "undecided":
            break
    section = {"seed": 0, "path": "simulated", "identical": identical, "chunks": chunks,
               "looks": looks, "rule": {"looks": LOOKS, "critical": critical, "alpha": ALPHA,
                                        "margin": policy.margin, "kl_margin": policy.kl_margin}}
    verdict = decide(section, policy)
    return verdict["decision"], looks[-1]["tokens"]


def existing_bot(rng: np.random.Generator, sims: int, level: float, drop: float) -> float:
    """Share of PRs the existing rule rejects: top-1 of one 280-token window below 0.90."""
    p = rng.beta(*beta_params(BASE_MEAN, BASE_SD), size=sims)
    extra = np.clip(drop * rng.exponential(1.0, sims), 0, 0.5)
    head_p = np.clip(p - extra, 0, 1)  # symmetric flips leave the level; the drop lowers it
    return float(np.mean(rng.binomial(280, head_p) / 280 < 0.90))


def _bound(k: int, n: int, upper: bool) -> float:
    """One-sided 95% Clopper-Pearson bound of a rate k/n."""
    if upper:
        return 1.0 if k == n else float(beta_dist.ppf(0.95, k + 1, n - k))
    return 0.0 if k == 0 else float(beta_dist.ppf(0.05, k, n - k + 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sims", type=int, default=600)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    policy = load_labels(ROOT / "evalbot" / "labels.yaml").policy("default").correctness
    critical = critical_values(LOOKS)
    started = time.time()
    scenarios = [("bit-identical", 0.0, 0.0, True)]
    scenarios += [(f"equivalent, discordance {100 * lv:g}%", lv, 0.0, False) for lv in LEVELS]
    scenarios += [(f"worse by {100 * d:g} pt, discordance {100 * lv:g}%", lv, d, False)
                  for d in DROPS for lv in LEVELS]
    print(f"policy default: margin {100 * policy.margin:g} pt top-1, KL margin {policy.kl_margin};"
          f" alpha {ALPHA} over {len(LOOKS)} looks of {WINDOW}-token windows "
          f"({LOOKS[0] * WINDOW}..{LOOKS[-1] * WINDOW} tokens); {args.sims} PRs per row\n")
    print(f"| {'simulated PR':<34} | {'REJECT':>7} | {'95% bd':>6} | {'pass':>6} | {'inconcl.':>8} | "
          f"{'tokens mean':>11} | {'tokens p95':>10} | {'existing bot REJECT':>19} |")
    print(f"|{'-' * 36}|{'-' * 8}:|{'-' * 7}:|{'-' * 7}:|{'-' * 9}:|{'-' * 12}:|{'-' * 11}:|{'-' * 20}:|")
    for name, level, drop, identical in scenarios:
        runs = [evaluate(rng, policy, critical, level, drop, identical) for _ in range(args.sims)]
        decisions = [d for d, _ in runs]
        tokens = np.array([t for _, t in runs])
        share = {k: decisions.count(k) / args.sims for k in ("reject", "inconclusive")}
        passed = 1 - share["reject"] - share["inconclusive"]
        old = existing_bot(rng, 20000, level, drop)
        bound = 100 * _bound(decisions.count("reject"), args.sims, upper=drop == 0)
        row = (f"| {name:<34} | {100 * share['reject']:6.2f}% | {bound:5.2f}% | "
               f"{100 * max(passed, 0.0):5.1f}% | {100 * share['inconclusive']:7.1f}% | ")
        print(row + f"{tokens.mean():11,.0f} | {np.percentile(tokens, 95):10,.0f} | "
              f"{100 * old:11.1f}% (280) |")
    print(f"\n{time.time() - started:.0f} s. REJECT on an equivalent row is a false reject, on a "
          "'worse' row a detection. 95% bd: one-sided Clopper-Pearson bound of REJECT\n"
          "(upper for equivalent PRs, lower for worse ones). pass = pass or inert. tokens: "
          "scored per side when the guard stopped.")


if __name__ == "__main__":
    main()
