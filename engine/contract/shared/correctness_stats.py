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
The deep chunks (engine/contract/shared/segments.py) get the reject half of the same rule on their own,
with their own critical value: a loss only at depth >= 32k is not diluted by the rest.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

TAIL = ("KL over the union of both top-k sets plus one rest bucket (the mass outside them), "
        "not renormalised; a token missing from one side's top-k gets that side's k-th "
        "probability, capped by its rest share")
DECISIONS = ("undecided", "pass", "reject")
Q_FLOOR = 1e-12  # a probability the engine side is charged at least (its dump printed 0 mass)
# Per-token KL histogram (for percentiles): bin 0 holds KL below 1e-6 (0 included), bins
# 1..80 are tenths of a decade from 1e-6 to 100 nats, bin 81 holds more than 100.
KL_EDGES = 10.0 ** (np.arange(-60, 21) / 10)
KL_BINS = len(KL_EDGES) + 1


def _arrays(top: Sequence[Sequence[Sequence[float]]]) -> tuple[np.ndarray, np.ndarray]:
    ids = np.array([[e[0] for e in row] for row in top], dtype=np.int64)
    lps = np.array([[e[1] for e in row] for row in top], dtype=np.float64)
    return ids.reshape(len(top), -1), lps.reshape(len(top), -1)


def kl_tokens(ref_top: Sequence[Sequence[Sequence[float]]],
              eng_top: Sequence[Sequence[Sequence[float]]]) -> np.ndarray:
    """KL(reference || engine) per position, from checked dumps (engine/contract/score_dump.py: sorted,
    k entries each). Buckets: every token of either top-k, and the rest of the vocabulary.

    A token in the reference's top-k but not the engine's has, on the engine side, at most the
    engine's k-th probability (it is not above it) and at most the engine's rest mass shared
    among its missing tokens: it is given that largest value, so a token that merely slipped
    below the k-th entry costs about nothing, and its own term never exceeds its true term.
    Likewise the other way round. What no top-k dump can show (divergence inside the rest) is
    not counted: merging tokens into one bucket can only lower KL (log-sum inequality).
    """
    return kl_arrays(*_arrays(ref_top), *_arrays(eng_top))


def kl_arrays(r_ids: np.ndarray, r_lp: np.ndarray, e_ids: np.ndarray,
              e_lp: np.ndarray) -> np.ndarray:
    """kl_tokens on [positions, k] arrays of ids and log-probabilities, sorted per row."""
    if r_ids.shape[0] == 0:
        return np.zeros(0)
    p, q = np.exp(r_lp), np.exp(e_lp)
    match = r_ids[:, :, None] == e_ids[:, None, :]
    ref_in_eng, eng_in_ref = match.any(2), match.any(1)
    p_rest = np.clip(1 - p.sum(1), 0, None)
    q_rest = np.clip(1 - q.sum(1), 0, None)
    miss_q, miss_p = (~ref_in_eng).sum(1), (~eng_in_ref).sum(1)
    q_hat = np.minimum(q[:, -1], q_rest / np.maximum(miss_q, 1))
    p_hat = np.minimum(p[:, -1], p_rest / np.maximum(miss_p, 1))
    q_at_ref = np.where(ref_in_eng, (match * q[:, None, :]).sum(2), q_hat[:, None])
    p_only = np.where(eng_in_ref, 0.0, p_hat[:, None])
    p_r = np.clip(p_rest - miss_p * p_hat, 0, None)
    q_r = np.clip(q_rest - miss_q * q_hat, 0, None)
    total = (_xlogx(p, q_at_ref).sum(1) + _xlogx(p_only, q).sum(1) + _xlogx(p_r, q_r))
    return np.clip(total, 0.0, None)


def _xlogx(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """p * ln(p / q) with 0 ln 0 = 0 and q floored at Q_FLOOR."""
    safe = np.where(p > 0, p, 1.0)
    return np.where(p > 0, p * (np.log(safe) - np.log(np.maximum(q, Q_FLOOR))), 0.0)


def kl(ref_top: Sequence[Sequence[float]], eng_top: Sequence[Sequence[float]]) -> float:
    """KL(reference || engine) at one position (see kl_tokens)."""
    return float(kl_tokens([ref_top], [eng_top])[0])


def kl_histogram(values: np.ndarray) -> list[int]:
    """Counts per KL_EDGES bin: mergeable across chunks, for the percentiles of summary()."""
    return np.bincount(np.searchsorted(KL_EDGES, values, side="right"),
                       minlength=KL_BINS).astype(int).tolist()


def chunk(index: int, kind: str, ref: list[dict[str, Any]], base: list[dict[str, Any]],
          head: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-window sums (and sums of squares), so chunk-level statistics can be formed later.

    The three dumps must cover the same positions (checked: a short one is refused, never cut).
    """
    n = len(ref)
    if n == 0 or len(base) != n or len(head) != n:
        raise ValueError(f"window {index} ({kind}): {n} reference, {len(base)} main and "
                         f"{len(head)} PR positions; a chunk needs the same positive number")
    ref_am = np.array([int(r["top"][0][0]) for r in ref])
    base_ok = np.array([int(b["argmax"]) for b in base]) == ref_am
    head_ok = np.array([int(h["argmax"]) for h in head]) == ref_am
    base_kl = kl_tokens([r["top"] for r in ref], [b["top"] for b in base])
    head_kl = kl_tokens([r["top"] for r in ref], [h["top"] for h in head])
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
        "base_kl_max": float(base_kl.max()),
        "head_kl_max": float(head_kl.max()),
        "base_kl_hist": kl_histogram(base_kl),
        "head_kl_hist": kl_histogram(head_kl),
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
        "tails": {side: kl_tails(chunks, side) for side in ("base", "head")},
    }


def kl_tails(chunks: Sequence[dict[str, Any]], side: str) -> dict[str, float | None]:
    """llama-perplexity's tail figures of per-token KL: the 99th and 99.9th percentiles (the
    upper edge of their histogram bin, so within a factor 1.26 above) and the maximum; None
    for results recorded without histograms."""
    hists = [c.get(f"{side}_kl_hist") for c in chunks]
    if not chunks or any(h is None for h in hists):
        return {"p99": None, "p999": None, "max": None}
    counts = np.sum(np.array(hists, dtype=np.int64), axis=0)
    cum = np.cumsum(counts)
    top = float(max(c[f"{side}_kl_max"] for c in chunks))

    def upper_edge(share: float) -> float:
        b = int(np.searchsorted(cum, share * cum[-1], side="left"))
        return min(float(KL_EDGES[b]) if b < len(KL_EDGES) else math.inf, top)

    return {"p99": upper_edge(0.99), "p999": upper_edge(0.999), "max": top}


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
         alpha: float, deep_critical: float = 0.0) -> dict[str, Any]:
    """One look of the rule in the module docstring; with deep_critical, the deep chunks
    (segments.py) are judged on their own too and can REJECT (never pass) alone."""
    s = summary(chunks, critical)
    top, kld = s["diff_top1"], s["diff_kl"]
    p = mcnemar_worse(s["discordant"]["head_only_right"], s["discordant"]["base_only_right"])
    deep = _deep(chunks, deep_critical, margin, kl_margin, alpha)
    if (top["hi"] < -margin and p < alpha) or kld["lo"] > kl_margin or deep.get("reject"):
        decision = "reject"
    elif top["lo"] > -margin and kld["hi"] < kl_margin:
        decision = "pass"
    else:
        decision = "undecided"
    out = {"chunks": s["chunks"], "tokens": s["tokens"], "critical": critical,
           "decision": decision, "diff_top1": top, "diff_kl": kld, "mcnemar_p": p}
    if deep:
        out["deep"] = deep
    return out


def _deep(chunks: Sequence[dict[str, Any]], critical: float, margin: float, kl_margin: float,
          alpha: float) -> dict[str, Any]:
    """The deep chunks alone: a loss confined to depth is not diluted by shallow positions.
    A one-sided guard: it can REJECT, never pass (512 deep tokens cannot show equivalence)."""
    deep = [c for c in chunks if c.get("kind") == "deep"]
    if critical <= 0 or len(deep) < 2:
        return {}
    s = summary(deep, critical)
    top, kld = s["diff_top1"], s["diff_kl"]
    p = mcnemar_worse(s["discordant"]["head_only_right"], s["discordant"]["base_only_right"])
    reject = (top["hi"] < -margin and p < alpha) or kld["lo"] > kl_margin
    return {"chunks": len(deep), "tokens": s["tokens"], "critical": critical,
            "diff_top1": top, "diff_kl": kld, "mcnemar_p": p, "reject": bool(reject)}


def sequential(chunks: Sequence[dict[str, Any]], looks: Sequence[int], critical: Sequence[float],
               margin: float, kl_margin: float, alpha: float,
               deep_critical: float = 0.0) -> list[dict[str, Any]]:
    """Replay every look the recorded chunks reach, stopping at the first decision."""
    out = []
    for count, crit in zip(looks, critical, strict=True):
        if count > len(chunks):
            break
        out.append(look(chunks[:count], crit, margin, kl_margin, alpha, deep_critical))
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
