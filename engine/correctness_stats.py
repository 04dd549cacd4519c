"""The correctness guard's arithmetic (numpy only): chunk sums, the paired look, consistency.

The harness applies `look` after every scoring round to decide whether to score more windows;
the bot replays `sequential` from the recorded chunks and must reach the same decisions.

Rule at look j, over the first K_j chunks (windows) with N positions in all:
  D   = sum(head_top1 - base_top1) / N          paired top-1 difference (head minus base)
  E   = sum(head_kl - base_kl) / N              paired KL difference
  SE  = max(cluster SE, per-token SE)           cluster: ratio estimator across chunks, because
                                                errors cluster within a window; per-token: the
                                                independence SE, a floor, since clustering can
                                                only widen it (a few chunks can show sd 0)
  interval = estimate +- c_j * SE               c_j from the bot: a t quantile, K_j - 1 df,
                                                two-sided, Bonferroni over the looks
  reject     if D's upper bound < -margin and McNemar (head worse, one-sided) p < alpha,
             or E's lower bound > kl_margin
  pass       if D's lower bound > -margin and E's upper bound < kl_margin
  undecided  otherwise: score more windows; undecided at the last look is inconclusive.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

FLOOR_LOGPROB = -20.0
TAIL = "missing top-k entries floored at -20, renormalised over the union of top-k sets"
DECISIONS = ("undecided", "pass", "reject")


def kl(ref_top: Sequence[Sequence[float]], eng_top: Sequence[Sequence[float]]) -> float:
    """KL(reference || engine) over the union of both top-k sets (tail: see TAIL)."""
    ref = {int(t): float(lp) for t, lp in ref_top}
    eng = {int(t): float(lp) for t, lp in eng_top}
    union = sorted(ref.keys() | eng.keys())
    p = np.exp([ref.get(t, FLOOR_LOGPROB) for t in union])
    q = np.exp([eng.get(t, FLOOR_LOGPROB) for t in union])
    p, q = p / p.sum(), q / q.sum()
    return float(np.sum(p * (np.log(p) - np.log(q))))


def chunk(index: int, kind: str, ref: list[dict[str, Any]], base: list[dict[str, Any]],
          head: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-window sums (and sums of squares), so chunk-level statistics can be formed later."""
    n = min(len(ref), len(base), len(head))
    ref_am = [int(ref[i]["top"][0][0]) for i in range(n)]
    base_ok = np.array([int(base[i]["argmax"]) == ref_am[i] for i in range(n)])
    head_ok = np.array([int(head[i]["argmax"]) == ref_am[i] for i in range(n)])
    base_kl = np.array([kl(ref[i]["top"], base[i]["top"]) for i in range(n)])
    head_kl = np.array([kl(ref[i]["top"], head[i]["top"]) for i in range(n)])
    return {
        "window": index,
        "kind": kind,
        "positions": n,
        "base_top1": int(base_ok.sum()),
        "head_top1": int(head_ok.sum()),
        "base_kl_sum": float(base_kl.sum()),
        "head_kl_sum": float(head_kl.sum()),
        "base_kl_sq_sum": float((base_kl**2).sum()),
        "head_kl_sq_sum": float((head_kl**2).sum()),
        "head_only_right": int((head_ok & ~base_ok).sum()),
        "base_only_right": int((base_ok & ~head_ok).sum()),
        "kl_diff_sum": float((head_kl - base_kl).sum()),
        "kl_diff_sq_sum": float(((head_kl - base_kl) ** 2).sum()),
    }


def interval(sums: np.ndarray, sq_sums: np.ndarray, n: np.ndarray, critical: float) -> dict:
    """Ratio estimate sum(sums)/sum(n) with the wider of the cluster and per-token SE."""
    total = float(n.sum())
    est = float(sums.sum()) / total
    k = sums.size
    cluster = (math.sqrt(k / (k - 1) * float(np.sum((sums - est * n) ** 2))) / total
               if k > 1 else math.inf)
    token_var = max(float(sq_sums.sum()) / total - est**2, 0.0)
    se = max(cluster, math.sqrt(token_var / total))
    return {"mean": est, "lo": est - critical * se, "hi": est + critical * se, "se": se}


COLUMNS = ("positions", "base_top1", "head_top1", "head_only_right", "base_only_right",
           "base_kl_sum", "base_kl_sq_sum", "head_kl_sum", "head_kl_sq_sum", "kl_diff_sum",
           "kl_diff_sq_sum")
_ROW = operator.itemgetter(*COLUMNS)


def summary(chunks: Sequence[dict[str, Any]], critical: float) -> dict[str, Any]:
    """Intervals of base, head and head-minus-base for top-1 agreement and mean KL.

    Sums of squares missing from older results count as 0 (no per-token floor)."""
    try:
        m = np.array([_ROW(c) for c in chunks], dtype=float).reshape(-1, len(COLUMNS))
    except KeyError:
        m = np.array([[c.get(k, 0.0) for k in COLUMNS] for c in chunks], dtype=float)
    n, b1, h1, hor, bor, bk, bk2, hk, hk2, dk, dk2 = m.T
    return {
        "chunks": len(chunks),
        "tokens": int(n.sum()),
        # top-1 is 0/1 per token, so its sum of squares is its sum
        "base": {"top1": interval(b1, b1, n, critical), "kl": interval(bk, bk2, n, critical)},
        "head": {"top1": interval(h1, h1, n, critical), "kl": interval(hk, hk2, n, critical)},
        "diff_top1": interval(hor - bor, hor + bor, n, critical),
        "diff_kl": interval(dk, dk2, n, critical),
        "discordant": {"head_only_right": int(hor.sum()), "base_only_right": int(bor.sum())},
    }


def mcnemar_worse(head_only: int, base_only: int) -> float:
    """Exact one-sided McNemar p-value that head is worse: P(X >= base_only), X ~ Bin(d, 1/2)."""
    d = head_only + base_only
    if d == 0:
        return 1.0
    if 2 * base_only > d:
        return _upper_tail(d, base_only)
    return max(0.0, 1.0 - _upper_tail(d, d - base_only + 1))  # symmetry of Bin(d, 1/2)


def _upper_tail(d: int, b: int) -> float:
    """P(X >= b) for X ~ Bin(d, 1/2) and b above the mode: the terms only fall from there."""
    if b > d:
        return 0.0
    log_first = math.lgamma(d + 1) - math.lgamma(b + 1) - math.lgamma(d - b + 1) - d * math.log(2)
    total, term = 0.0, 1.0
    for i in range(b, d + 1):
        total += term
        term *= (d - i) / (i + 1)
        if term < 1e-17 * total:
            break
    return min(1.0, math.exp(log_first) * total)


def look(chunks: Sequence[dict[str, Any]], critical: float, margin: float, kl_margin: float,
         alpha: float) -> dict[str, Any]:
    """One look of the rule in the module docstring."""
    s = summary(chunks, critical)
    top, kld = s["diff_top1"], s["diff_kl"]
    p = mcnemar_worse(s["discordant"]["head_only_right"], s["discordant"]["base_only_right"])
    if (top["hi"] < -margin and p < alpha) or kld["lo"] > kl_margin:
        decision = "reject"
    elif top["lo"] > -margin and kld["hi"] < kl_margin:
        decision = "pass"
    else:
        decision = "undecided"
    return {"chunks": s["chunks"], "tokens": s["tokens"], "critical": critical,
            "decision": decision, "diff_top1": top, "diff_kl": kld, "mcnemar_p": p}


def sequential(chunks: Sequence[dict[str, Any]], looks: Sequence[int], critical: Sequence[float],
               margin: float, kl_margin: float, alpha: float) -> list[dict[str, Any]]:
    """Replay every look the recorded chunks reach, stopping at the first decision."""
    out = []
    for count, crit in zip(looks, critical, strict=True):
        if count > len(chunks):
            break
        out.append(look(chunks[:count], crit, margin, kl_margin, alpha))
        if out[-1]["decision"] != "undecided":
            break
    return out


def consistency_positions(decode: Sequence[int], score: Sequence[dict[str, Any]],
                          start: int) -> list[float | None]:
    """Per decode step, how far (nats) below the score run's top its greedy token sits.

    decode[j] is the greedy token after feeding speed token start + j, which the score run
    predicts at position start + j. 0.0: same argmax; None: not even in the score's top-k.
    """
    gaps: list[float | None] = []
    for j, token in enumerate(decode):
        if start + j >= len(score):
            break
        top = {int(t): float(lp) for t, lp in score[start + j]["top"]}
        best = max(top.values())
        if int(token) == int(score[start + j]["argmax"]):
            gaps.append(0.0)
        else:
            gaps.append(round(best - top[int(token)], 6) if int(token) in top else None)
    return gaps


def inconsistent(gaps: Sequence[float | None], tie_nats: float, max_mismatch: float) -> int:
    """Mismatches beyond a near-tie; returns their count if above the allowed share, else 0."""
    bad = sum(1 for g in gaps if g is None or g > tie_nats)
    return bad if bad > max_mismatch * len(gaps) else 0
