"""A results document as it may be published (evalbot/report/publication.py states the rule).

Built field by field from what is known to be safe, never by deleting what is not: a field a
later harness adds is left out until someone decides it may be shown. What remains is what a
reader needs to check the comment against the measurement: the commits and builds, the box, the
stopping rule, the models by file name, main's samples and every look's decision per cell, each
witness's plan and main's times, which correctness windows were scored, the failures as fixed
sentences, and the box time per stage. The head's figure, where the bot believes it, is the
verdict's; its samples, witness seconds and answers, greedy tokens and scores are not shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from evalbot.report.failure_text import public_failure
from evalbot.report.numbers import steerable

SCHEMA = "evalbot.published-results/1"
HEADER = ("job_id", "profile", "profile_version", "harness_version", "merge_base")
CELL = ("model", "metric", "ctx", "unit", "higher_is_better", "anchor", "stopped", "clock_lock")
MAIN_SAMPLE = ("pair", "value", "dropped", "throttled", "gpu_before", "gpu_after")
WITNESS = ("name", "source", "clock", "cells", "pairs", "looks", "steps", "output_tokens",
           "min_agreement", "stopped")
CORRECTNESS = ("seed", "corpus_version", "model", "path", "tail", "tokens", "topk",
               "window_tokens", "long_window_tokens", "windows", "reference")
BUILD_FAILURES = ("", "checkout", "build", "timeout", "artifacts", "harness")


def _pick(doc: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: doc[k] for k in keys if k in doc}


def public_results(results: Mapping[str, Any]) -> dict[str, Any]:
    """The published copy of a results document (idempotent: a published copy is returned
    as it is)."""
    if results.get("schema") == SCHEMA:
        return dict(results)
    out: dict[str, Any] = {"schema": SCHEMA, **_pick(results, HEADER)}
    for side in ("base", "head"):
        if isinstance(results.get(side), dict):
            out[side] = _build(results[side], side)
    if isinstance(results.get("box"), dict):
        out["box"] = dict(results["box"])
    if isinstance(results.get("rule"), dict):
        out["rule"] = dict(results["rule"])
    out["models"] = [_model(m) for m in results.get("models") or [] if isinstance(m, dict)]
    out["cells"] = [_cell(c) for c in results.get("cells") or [] if isinstance(c, dict)]
    if "witnesses" in results:
        out["witnesses"] = [_witness(w) for w in results["witnesses"] or []
                            if isinstance(w, dict)]
    if isinstance(results.get("correctness"), dict):
        out["correctness"] = _pick(results["correctness"], CORRECTNESS)
    out["failures"] = [public_failure(f) for f in results.get("failures") or []
                       if isinstance(f, dict)]
    if isinstance(results.get("timing"), dict):
        out["timing"] = _timing(results["timing"])
    return out


def _build(facts: Mapping[str, Any], side: str) -> dict[str, Any]:
    """A side's build: main's artifact hashes, never the head's (a build can choose its
    artifacts' bytes until their hashes spell what it read on the box)."""
    out = {k: facts[k] for k in ("sha", "ok", "cached") if k in facts}
    out["duration_s"] = steerable(facts.get("duration_s"))
    failure = facts.get("failure", "")
    out["failure"] = failure if failure in BUILD_FAILURES else "build"
    if side == "base" and isinstance(facts.get("artifacts"), dict):
        out["artifacts"] = dict(facts["artifacts"])
    return out


def _model(model: Mapping[str, Any]) -> dict[str, Any]:
    out = _pick(model, ("name", "role", "namespace", "sha256"))
    if "path" in model:
        out["path"] = PurePosixPath(str(model["path"])).name  # the file, not the box's path
    return out


def _cell(cell: Mapping[str, Any]) -> dict[str, Any]:
    out = _pick(cell, CELL)
    out["samples"] = [_pick(s, MAIN_SAMPLE) for s in cell.get("samples") or []
                      if isinstance(s, dict) and s.get("side") == "base"]
    out["looks"] = [{"pairs": lk.get("pairs"), "decision": lk.get("decision"),
                     "sd": steerable(lk.get("sd"))}
                    for lk in cell.get("looks") or [] if isinstance(lk, dict)]
    return out


def _witness(record: Mapping[str, Any]) -> dict[str, Any]:
    """A witness's plan and main's times; of the head's processes only whether any ran and
    whether one failed or disagreed with main (the comment's why-line needs no more)."""
    if record.get("schema") == SCHEMA or "head_failed" in record:
        return dict(record)
    samples = [s for s in record.get("samples") or [] if isinstance(s, dict)]
    out = _pick(record, WITNESS)
    out["ran"] = bool(samples)
    out["head_failed"] = any(s.get("side") == "head" and not s.get("dropped")
                             and not s.get("verified") for s in samples)
    out["samples"] = [{"pair": s.get("pair"), "seconds": s.get("seconds"),
                       "dropped": s.get("dropped")} for s in samples if s.get("side") == "base"]
    return out


def _timing(timing: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"total_s": steerable(timing.get("total_s"))}
    if isinstance(timing.get("stages"), dict):
        out["stages"] = {k: steerable(v) for k, v in timing["stages"].items()}
    return out
