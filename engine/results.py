"""Results schema v1 (harness -> bot): the builder's constants and the validator the bot uses.

History: v1 (2026-11) first frozen version; see docs/contracts.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.checks import ContractError, field, one_of, sha

RESULTS_SCHEMA = "evalbot.results/1"
SIDES = ("base", "head", "harness")
STAGES = ("prepare", "checkout", "build", "speed", "score", "harness")
ATTRIBUTIONS = ("pr", "infra")
FAILURE_KINDS = ("build-failed", "crashed", "timeout", "spoofed", "infra-error")


def validate(doc: Any) -> dict[str, Any]:
    """Check a results document against v1; raise ContractError naming the first bad field."""
    if field(doc, "", "schema", str) != RESULTS_SCHEMA:
        raise ContractError(f"schema: expected {RESULTS_SCHEMA!r}, got {doc.get('schema')!r}")
    field(doc, "", "job_id", str)
    field(doc, "", "profile", str)
    field(doc, "", "box", dict)
    for side in ("base", "head"):
        facts = field(doc, "", side, dict)
        sha(field(facts, side, "sha", str), f"{side}.sha")
        field(facts, side, "ok", bool)
    rule = field(doc, "", "rule", dict)
    for key in ("looks", "critical"):
        field(rule, "rule", key, list)
    for key in ("sd_floor", "significance", "tolerance"):
        field(rule, "rule", key, float)
    for i, cell in enumerate(field(doc, "", "cells", list)):
        where = f"cells[{i}]"
        field(cell, where, "model", str)
        one_of(field(cell, where, "metric", str), ("decode", "prefill"), f"{where}.metric")
        field(cell, where, "ctx", int)
        field(cell, where, "higher_is_better", bool)
        for j, s in enumerate(field(cell, where, "samples", list)):
            one_of(field(s, f"{where}.samples[{j}]", "side", str), ("base", "head"), "side")
            field(s, f"{where}.samples[{j}]", "value", float)
            field(s, f"{where}.samples[{j}]", "pair", int)
            field(s, f"{where}.samples[{j}]", "dropped", bool)
        field(cell, where, "looks", list)
    corr = field(doc, "", "correctness", dict, optional=True)
    if corr is not None:
        field(corr, "correctness", "seed", int)
        field(corr, "correctness", "identical", bool)
        for i, chunk in enumerate(field(corr, "correctness", "chunks", list)):
            for key in ("positions", "base_top1", "head_top1", "head_only_right", "base_only_right"):
                field(chunk, f"correctness.chunks[{i}]", key, int)
    for i, failure in enumerate(field(doc, "", "failures", list)):
        where = f"failures[{i}]"
        one_of(field(failure, where, "side", str), SIDES, f"{where}.side")
        one_of(field(failure, where, "stage", str), STAGES, f"{where}.stage")
        one_of(field(failure, where, "attribution", str), ATTRIBUTIONS, f"{where}.attribution")
        one_of(field(failure, where, "kind", str), FAILURE_KINDS, f"{where}.kind")
        field(failure, where, "message", str)
    return doc


def load(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ContractError(f"{path}: not a readable results file: {exc}") from exc
    return validate(doc)
