"""The correctness part of the PR comment: one line when it passed or is identical, a table
only when it matters (changed, undecided, main below the floors, speed/score mismatch)."""

from __future__ import annotations

import math
from typing import Any

from evalbot.report.numbers import newcombe, p_value, signed, wilson

QUIET = ("inert", "pass", "not-scored")
# Fields a scorer may add (mean KL with its error, p99 KL, same-top rate): shown when present.
OPTIONAL = (("kl_p99", "p99 KL"), ("same_top", "same top token as main"))


def matters(corr: dict[str, Any]) -> bool:
    cons = corr.get("consistency") or {}
    return corr["decision"] not in QUIET or bool(corr.get("drift")) or bool(
        cons.get("head_mismatch"))


def line(corr: dict[str, Any]) -> str:
    """`correctness: identical to main` and the like: the whole answer when nothing is wrong."""
    decision = corr["decision"]
    if decision == "not-scored":
        return "correctness not scored"
    tokens = f"{corr.get('tokens', 0):,} tokens"
    depths = corr.get("depths") or {}
    if (depths.get("min") or 0) >= 1024:  # long windows only: say how deep the scoring reached
        tokens += f", some at {depths['min'] // 1024}k+ depth"
    if decision == "inert":
        return f"correctness: identical to main, bit for bit ({tokens})"
    if decision == "pass":
        return f"correctness: same as main ({tokens})"
    if decision == "reject":
        return "correctness: **changed**"
    if decision == "inconclusive":
        return f"correctness: undecided after {tokens} (not a reject)"
    return f"correctness: {decision.replace('-', ' ')}"


def top1_drop(corr: dict[str, Any]) -> str:
    """`top-1 agreement 1.000 → 0.162`, for the headline of an incorrect verdict."""
    base, head = corr["base"]["top1"]["mean"], corr["head"]["top1"]["mean"]
    return f"top-1 agreement with the reference {base:.3f} → {head:.3f}"


def table(corr: dict[str, Any]) -> dict[str, Any]:
    """Rows (measure, main, PR, PR − main), each value with its interval."""
    n = int(corr.get("tokens") or 0)
    b, h = corr["base"]["top1"], corr["head"]["top1"]
    b_ci, h_ci = _wilson(b, n), _wilson(h, n)
    d_lo, d_hi = newcombe(b["mean"], b_ci, h["mean"], h_ci)
    d = h["mean"] - b["mean"]
    rows = [
        ("top-1 agreement with the reference", _prop(b["mean"], b_ci), _prop(h["mean"], h_ci),
         f"{_points(d)} [{_points(d_lo)}, {_points(d_hi)}] points"),
        ("mean KL(reference ‖ engine)", _kl(corr["base"]["kl"]), _kl(corr["head"]["kl"]),
         _kl(corr["diff_kl"], difference=True)),
    ]
    return {"rows": rows, "text": _because(corr)}


def _wilson(d: dict[str, float], n: int) -> tuple[float, float]:
    return wilson(d["mean"], d["lo"], d["hi"], n)


def _prop(p: float, ci: tuple[float, float]) -> str:
    return f"{p:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def _points(x: float) -> str:
    return signed(100 * x, "+.1f")


def _kl(d: dict[str, float], difference: bool = False) -> str:
    """KL is never below 0 (a difference of two can be); 3 significant digits."""
    lo = d["lo"] if difference else max(0.0, d["lo"])
    if max(abs(d["mean"]), abs(lo), abs(d["hi"])) < 5e-4:
        return "0 (< 0.0005)"
    fmt = "+.3g" if difference else ".3g"
    return f"{signed(d['mean'], fmt)} [{signed(lo, fmt)}, {signed(d['hi'], fmt)}]"


def _because(corr: dict[str, Any]) -> str:
    """One sentence on what made the decision, with our numbers (not the raw reasons)."""
    cons = corr.get("consistency") or {}
    if cons.get("head_mismatch"):
        return ("The PR's timed decode produced other tokens than its score run predicts: the "
                "benchmarked path is not the scored one.")
    if corr.get("drift"):
        return "Main itself is below the absolute floors (reference drift): they are not applied."
    disc = corr.get("discordant") or {}
    worse, better = disc.get("base_only_right", 0), disc.get("head_only_right", 0)
    return (f"Tokens where only main matched the reference: {worse:,}; only the PR: {better:,} "
            f"(McNemar p {p_value(corr.get('mcnemar_p'))}).")


def details(corr: dict[str, Any]) -> str:
    """The folded account: what was scored, the thresholds, the consistency check."""
    if corr["decision"] == "not-scored":
        return ""
    lines = [f"- {corr.get('tokens', 0):,} tokens in {corr.get('chunks', '?')} windows of held-out "
             f"text, seed `{corr.get('seed')}`; scored: {corr.get('path', '?')}."]
    if not matters(corr) and corr["decision"] != "inert":
        lines.append("- " + table(corr)["text"])
    for key, name in OPTIONAL:
        value = corr.get(key)
        if isinstance(value, int | float) and math.isfinite(value):
            lines.append(f"- {name}: {value:.4g}")
    floors = corr.get("floors") or {}
    if floors:
        points = 100 * corr.get("margin", 0)
        lines.append(f"- A PR is rejected when its top-1 agreement is more than {points:g} "
                     f"point{'' if points == 1 else 's'} below main's or its KL more than "
                     f"{corr.get('kl_margin', 0):g} above, or when it falls below top-1 "
                     f"{floors['top1']:g} / above KL {floors['kl']:g} "
                     f"({'calibrated from main' if floors.get('calibrated') else 'policy default'}).")
    lines.append(f"- Speed/score consistency: {_consistency(corr.get('consistency') or {})}.")
    lines.extend(f"- {n[:1].upper()}{n[1:]}." for n in corr.get("notes") or [])
    return "\n".join(lines)


def _consistency(cons: dict[str, Any]) -> str:
    if not cons.get("checked"):
        return f"not checked ({cons.get('note') or 'no greedy tokens recorded'})"
    bad = sum(r["mismatches"] for r in cons.get("cells", []))
    total = sum(r["compared"] for r in cons.get("cells", []))
    state = "MISMATCH" if cons.get("head_mismatch") else "consistent"
    return f"{state} ({bad} of {total} greedy tokens differ)"
