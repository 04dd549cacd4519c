"""Every model's correctness outcome reaches the headline (pure).

The profile's models guard one another (`correctness.guards`): each is scored with the same
recipe and decided alone. The evaluation's correctness is the worst of them, in this order:
reject (the PR computes another model), infra-error (the reference or main of some model is
unusable: nothing is known about that model), inconclusive (some model is still undecided at
its last look: no tier), then the scored model's own outcome. Before this, a guard model's
inconclusive or infra-error left the headline at `eval:none`.
"""

from __future__ import annotations

from typing import Any

WORST_FIRST = ("reject", "infra-error", "inconclusive")
# The per-model label a model's own correctness outcome sets, whatever its cells say.
MODEL_LABEL = {"reject": "REJECT", "infra-error": "infra-error", "inconclusive": "inconclusive"}


def combined(corr: dict[str, Any], guards: list[dict[str, Any]]) -> dict[str, Any]:
    """The scored model's decision, replaced by the worst of every model's (see above); the
    reasons say which model each comes from."""
    for outcome in WORST_FIRST:
        if corr["decision"] == outcome:
            return corr
        hit = [g for g in guards if g["decision"] == outcome]
        if hit:
            return {**corr, "decision": outcome,
                    "reasons": [f"{g.get('model') or 'guard model'}: {r}" for g in hit
                                for r in g["reasons"]]}
    return corr


def model_labels(corr: dict[str, Any], guards: list[dict[str, Any]]) -> dict[str, str]:
    """Model name -> the label its own correctness outcome forces (reject, infra-error,
    inconclusive) under every headline: a model's label says its own outcome (issue 46).
    Models whose correctness passed are absent (their cells decide, capped by the headline)."""
    out = {}
    for section in (corr, *guards):
        label = MODEL_LABEL.get(section.get("decision", ""))
        if label and section.get("model"):
            out[str(section["model"])] = label
    return out
