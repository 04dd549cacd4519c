"""The existing sparkinfer bot's label function (label.py, existing-bot.md section 4.1 and 4.3).

Applied by the `sparkinfer-compat` policy to the geometric means of the measured pairs of a cell
that the statistics already call improved and a witness of the harness confirmed (its rate no
more than the witness's time allows: `cell_label`), with the llama.cpp anchor of that (model, metric,
context) from the profile (the existing bot mis-wires them; here each cell carries its own).
Pure arithmetic, no I/O.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from evalbot.grading.policy import TIER_ORDER, Policy

PRECISION = 9  # gains compare at 1e-9: +2.0% is none even after exp/log round trips
BATCHED_PP = 1000.0  # tok/s: label.py's callers treat faster prefill as "batched" (frontier anchor)


@dataclass(frozen=True)
class CompatLabel:
    tier: str  # XL..XS or none
    gain: float  # raw gain g over the frontier (main)
    fair_gain: float  # g_fair, against the anchor
    difficulty: float  # D
    effective: float  # g_eff = min(g_fair * D, 2 g)
    anchor: str  # "llama.cpp" or "frontier"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def label(value: float, frontier: float, ref: float, lower_is_better: bool,
          policy: Policy) -> CompatLabel:
    """label.py's speed tier for one measurement against main (`frontier`) and an anchor.

    `ref` <= 0 means no anchor: the frontier itself is the reference (D = 1, g_fair = g).
    """
    if not (value > 0 and frontier > 0):
        raise ValueError(f"compat label needs positive values, got {value} vs {frontier}")
    g = (frontier - value) / frontier if lower_is_better else (value - frontier) / frontier
    g = round(g, PRECISION)
    anchor = "llama.cpp" if ref > 0 else "frontier"
    ref = ref if ref > 0 else frontier
    if g <= policy.significance:
        return CompatLabel("none", g, g, 1.0, g, anchor)
    fair = (ref - value) / ref if lower_is_better else (value - frontier) / ref
    ratio = ref / frontier if lower_is_better else frontier / ref
    d = min(1 + policy.difficulty_k * max(0.0, ratio - 1), policy.difficulty_max) \
        if policy.difficulty_boost else 1.0
    effective = round(min(fair * d, 2 * g), PRECISION)
    tier = next((t for t in TIER_ORDER if effective >= policy.tiers[t]), TIER_ORDER[-1])
    return CompatLabel(tier, g, fair, d, effective, anchor)


def cell_label(cell: dict[str, Any], policy: Policy) -> CompatLabel:
    """The compat label of a graded cell: decode on tok/s, prefill on time to first token. The
    head's rate is a printed claim: it counts for no more than its witness's one-sided 95% upper
    bound of the gain allows (`witness_gain_hi`, the harness's own time: issue 53, one clock)."""
    base, head, anchor = cell["base_gmean"], cell["head_gmean"], cell.get("anchor") or 0.0
    if cell.get("witness_gain_hi") is not None:
        head = min(head, base * (1 + cell["witness_gain_hi"]))
    if cell["metric"] == "decode":
        return label(head, base, anchor, False, policy)
    # Prefill: TTFT = ctx / rate. label.py's callers fall back to the frontier anchor when the
    # llama.cpp reference is missing or implausible (section 4.3).
    implausible = (anchor <= 0 or anchor >= 50 * head or anchor >= 2 * base
                   or head >= BATCHED_PP)
    ctx = max(int(cell["ctx"]), 1)
    ref = 0.0 if implausible else ctx / anchor
    return label(ctx / head, ctx / base, ref, True, policy)
