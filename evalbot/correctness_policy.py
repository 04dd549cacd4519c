"""The correctness decision (pure): head against base, chunk by chunk, then absolute floors.

Chunks (windows) are the unit of the interval because errors cluster within a window.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats as sps

from evalbot.policy import CorrectnessPolicy

Z_ALPHA = 0.01  # two-sided level of the paired chunk interval


def decide(section: dict[str, Any] | None, policy: CorrectnessPolicy) -> dict[str, Any]:
    if section is None:
        return {"decision": "not-scored", "reasons": ["the profile scores no correctness"]}
    chunks = section["chunks"]
    n = np.array([c["positions"] for c in chunks], dtype=float)
    base_top1 = np.array([c["base_top1"] for c in chunks]) / n
    head_top1 = np.array([c["head_top1"] for c in chunks]) / n
    base_kl = np.array([c["base_kl_sum"] for c in chunks]) / n
    head_kl = np.array([c["head_kl_sum"] for c in chunks]) / n
    out: dict[str, Any] = {
        "tokens": int(n.sum()),
        "chunks": len(chunks),
        "seed": section["seed"],
        "path": section["path"],
        "tail": section.get("tail", ""),
        "base": {"top1": _mean_ci(base_top1), "kl": _mean_ci(base_kl)},
        "head": {"top1": _mean_ci(head_top1), "kl": _mean_ci(head_kl)},
        "diff_top1": _mean_ci(head_top1 - base_top1),
        "diff_kl": _mean_ci(head_kl - base_kl),
        "discordant": {"head_only_right": sum(c["head_only_right"] for c in chunks),
                       "base_only_right": sum(c["base_only_right"] for c in chunks)},
        "reasons": [],
    }
    out["mcnemar_p"] = _mcnemar(out["discordant"]["head_only_right"],
                                out["discordant"]["base_only_right"])
    if section["identical"]:
        out["decision"] = "inert"
        out["reasons"].append("head's log-probabilities equal base's bit for bit")
        return out
    out["decision"] = _paired(out, policy)
    _floors(out, policy)
    return out


def _mean_ci(values: np.ndarray) -> dict[str, float]:
    """Mean with a t interval across chunks (a cluster interval)."""
    m = float(np.mean(values))
    if values.size < 2:
        return {"mean": m, "lo": -math.inf, "hi": math.inf}
    half = float(sps.t.ppf(1 - Z_ALPHA / 2, values.size - 1) * np.std(values, ddof=1)
                 / math.sqrt(values.size))
    return {"mean": m, "lo": m - half, "hi": m + half}


def _paired(out: dict[str, Any], policy: CorrectnessPolicy) -> str:
    top1, kl = out["diff_top1"], out["diff_kl"]
    if top1["hi"] < -policy.margin:
        out["reasons"].append(
            f"top-1 agreement fell {-100 * top1['mean']:.1f} points against main "
            f"(interval {100 * top1['lo']:+.1f} to {100 * top1['hi']:+.1f}), beyond the "
            f"{100 * policy.margin:.0f}-point margin")
        return "reject"
    if kl["lo"] > policy.kl_margin:
        out["reasons"].append(f"mean KL rose by {kl['mean']:.3f} against main, beyond "
                              f"{policy.kl_margin}")
        return "reject"
    if top1["lo"] > -policy.margin and kl["hi"] < policy.kl_margin:
        return "pass"
    out["reasons"].append("head against main is undecided at this token count")
    return "inconclusive"


def _floors(out: dict[str, Any], policy: CorrectnessPolicy) -> None:
    """Absolute floors judge the PR only when main itself clears them."""
    base_ok = out["base"]["top1"]["lo"] >= policy.top1_floor and \
        out["base"]["kl"]["hi"] <= policy.kl_ceiling
    if not base_ok:
        out["drift"] = True
        out["reasons"].append("main itself is below the absolute floors (reference drift); "
                              "floors not applied to the PR")
        return
    out["drift"] = False
    if out["head"]["top1"]["hi"] < policy.top1_floor or out["head"]["kl"]["lo"] > policy.kl_ceiling:
        out["decision"] = "reject"
        out["reasons"].append("head is below the absolute floors while main clears them")


def _mcnemar(head_only: int, base_only: int) -> float | None:
    """Exact McNemar p-value on discordant tokens: a per-token cross-check, not the decision."""
    total = head_only + base_only
    if total == 0:
        return None
    return float(sps.binomtest(head_only, total, 0.5).pvalue)
