"""Results schema v1 (harness -> bot): the builder's constants and the validator the bot uses.

History: v1 (2026-11) first frozen version; see docs/contracts.md.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .checks import ContractError, field, one_of, sha

RESULTS_SCHEMA = "evalbot.results/1"
SIDES = ("base", "head", "harness")
STAGES = ("prepare", "checkout", "build", "speed", "score", "harness")
ATTRIBUTIONS = ("pr", "infra")
FAILURE_KINDS = ("build-failed", "crashed", "timeout", "spoofed", "infra-error")
# engine/measure/witness.py WitnessRecord.stopped
WITNESS_STOPS = ("", "settled", "box_time", "not_needed", "floor_stale")
# `timing.stages`: the job's box seconds by what they went to (engine/harness/stopwatch.py);
# `rest` is what none of the others covers (set-up, tokenizing, sealing, status and results files)
TIMING_STAGES = ("builds", "warmups", "measuring", "witnesses", "correctness_reference",
                 "correctness_base", "correctness_head", "rest")


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
    for i, witness in enumerate(field(doc, "", "witnesses", list, optional=True) or []):
        _witness(witness, f"witnesses[{i}]")
    corr = field(doc, "", "correctness", dict, optional=True)
    if corr is not None:
        _correctness(corr)
    for guard in field(doc, "", "correctness_guards", list, optional=True) or []:
        if not isinstance(guard, dict):
            raise ContractError("correctness_guards: sections only")
        _correctness(guard)
    for i, failure in enumerate(field(doc, "", "failures", list)):
        where = f"failures[{i}]"
        one_of(field(failure, where, "side", str), SIDES, f"{where}.side")
        one_of(field(failure, where, "stage", str), STAGES, f"{where}.stage")
        one_of(field(failure, where, "attribution", str), ATTRIBUTIONS, f"{where}.attribution")
        one_of(field(failure, where, "kind", str), FAILURE_KINDS, f"{where}.kind")
        field(failure, where, "message", str)
    _timing(field(doc, "", "timing", dict, optional=True))
    return doc


def _timing(timing: dict[str, Any] | None) -> None:
    """`timing.stages`, from harnesses since it was added (older files have `total_s` alone,
    which stays unchecked as it always was), with the `total_s` they add up to."""
    stages = field(timing, "timing", "stages", dict, optional=True) if timing else None
    if stages is None:
        return
    seconds = {"total_s": field(timing, "timing", "total_s", float),
               **{f"stages.{k}": field(stages, "timing.stages", k, float) for k in TIMING_STAGES}}
    bad = [k for k, v in seconds.items() if not 0 <= v < math.inf]  # NaN fails both
    if bad:
        raise ContractError(f"timing.{bad[0]}: seconds are finite and >= 0, got {seconds[bad[0]]}")


def _witness(w: dict[str, Any], where: str) -> None:
    """A timed witness (or a run's samples as one): the covered cells and every process."""
    field(w, where, "name", str)
    one_of(field(w, where, "source", str), ("samples", "witness"), f"{where}.source")
    cells = field(w, where, "cells", dict)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in cells.values()):
        raise ContractError(f"{where}.cells: token counts must be integers")
    # the calibrated floor the bot pools the witness's sd with (engine/contract/shared/witness_interval.py)
    if (field(w, where, "sd_floor_s", float, optional=True) or 0) < 0 \
            or (field(w, where, "floor_df", int, optional=True) or 0) < 0:
        raise ContractError(f"{where}.sd_floor_s, floor_df: a floor and its df are >= 0")
    # why the harness stopped it (engine/measure/witness.py; optional: added in v1)
    one_of(field(w, where, "stopped", str, optional=True) or "", WITNESS_STOPS, f"{where}.stopped")
    # the harness's reason a run's wall times do not show its printed saving (samples only)
    field(w, where, "wall_reason", str, optional=True)
    if (field(w, where, "allowance_s", float, optional=True) or 0) < 0:
        raise ContractError(f"{where}.allowance_s: seconds are >= 0")
    for j, s in enumerate(field(w, where, "samples", list)):
        at = f"{where}.samples[{j}]"
        one_of(field(s, at, "side", str), ("base", "head"), f"{at}.side")
        field(s, at, "pair", int)
        field(s, at, "seconds", float)
        field(s, at, "dropped", bool)
        field(s, at, "verified", bool)
        # the process's start-to-exit box time, whatever its clock (optional: added in v1)
        if (field(s, at, "wall_s", float, optional=True) or 0) < 0:
            raise ContractError(f"{at}.wall_s: seconds are >= 0")


def _correctness(corr: dict[str, Any]) -> None:
    """The correctness section: chunk sums, looks, the rule and the consistency check."""
    w = "correctness"
    field(corr, w, "seed", int)
    field(corr, w, "identical", bool)
    field(corr, w, "path", str)
    chunks = field(corr, w, "chunks", list)
    if not chunks:
        raise ContractError(f"{w}.chunks: empty")
    for i, chunk in enumerate(chunks):
        for key in ("positions", "base_top1", "head_top1", "head_only_right", "base_only_right"):
            field(chunk, f"{w}.chunks[{i}]", key, int)
        for key in ("base_kl_sum", "head_kl_sum", "kl_diff_sum"):
            field(chunk, f"{w}.chunks[{i}]", key, float)
        if chunk["positions"] < 1 or not 0 <= chunk["base_top1"] <= chunk["positions"]:
            raise ContractError(f"{w}.chunks[{i}]: counts out of range")
    rule = field(corr, w, "rule", dict, optional=True)
    if rule is not None:
        looks, critical = field(rule, f"{w}.rule", "looks", list), field(rule, f"{w}.rule",
                                                                       "critical", list)
        # a long window gives several chunks: the looks' chunk counts (older: windows)
        looks = field(rule, f"{w}.rule", "chunk_looks", list, optional=True) or looks
        if len(looks) != len(critical) or len(chunks) not in looks:
            raise ContractError(f"{w}.rule: {len(chunks)} chunks, looks {looks}, "
                                f"{len(critical)} critical values")
        for i, lk in enumerate(field(corr, w, "looks", list)):
            one_of(field(lk, f"{w}.looks[{i}]", "decision", str), ("undecided", "pass", "reject"),
                   f"{w}.looks[{i}].decision")
    for i, lk in enumerate(field(corr, w, "drift_looks", list, optional=True) or []):
        one_of(field(lk, f"{w}.drift_looks[{i}]", "status", str),
               ("drift", "clear", "undecided"), f"{w}.drift_looks[{i}].status")
    _reference(field(corr, w, "reference", dict, optional=True))
    _main_scores(field(corr, w, "main_scores", dict, optional=True))
    consistency = field(corr, w, "consistency", dict, optional=True) or {}
    for i, cell in enumerate(consistency.get("cells", [])):
        one_of(field(cell, f"{w}.consistency.cells[{i}]", "side", str), ("base", "head"), "side")
        gaps = field(cell, f"{w}.consistency.cells[{i}]", "gaps", list)
        if not all(g is None or isinstance(g, (int, float)) for g in gaps):
            raise ContractError(f"{w}.consistency.cells[{i}].gaps: numbers or null only")


def _reference(ref: dict[str, Any] | None) -> None:
    """How the reference windows were obtained (optional: harnesses before the warmed cache
    did not say): read from the box's cache, or scored by this evaluation; on which device."""
    if ref is None:
        return
    w = "correctness.reference"
    if any(field(ref, w, key, int) < 0 for key in ("cached", "scored")):
        raise ContractError(f"{w}: window counts are >= 0")
    field(ref, w, "device", str, optional=True)


def _main_scores(got: dict[str, Any] | None) -> None:
    """How main's windows were obtained (optional: harnesses before main's cache did not
    say): read from the box's cache of main's build, or scored by this evaluation."""
    if got is not None and any(field(got, "correctness.main_scores", key, int) < 0
                               for key in ("cached", "scored")):
        raise ContractError("correctness.main_scores: window counts are >= 0")


def upgrade(doc: Any) -> dict[str, Any]:
    """An older results document brought to the current schema (a copy); validate() it after.

    v1 gained fields after its first harness shipped; a document without them gets the value
    that harness behaved as: `correctness.path` "" (it scored the benchmarked path), empty
    `log_tail`, `stopped` and box name. A newer major version than ours is refused by name.
    """
    if not isinstance(doc, dict):
        raise ContractError("results: not a JSON object")
    schema = doc.get("schema")
    if schema != RESULTS_SCHEMA:
        prefix, _, major = str(schema).rpartition("/")
        if prefix == RESULTS_SCHEMA.rpartition("/")[0] and major.isdigit() and \
                int(major) > int(RESULTS_SCHEMA.rpartition("/")[2]):
            raise ContractError(f"schema {schema!r} is newer than this evalbot reads "
                                f"({RESULTS_SCHEMA!r}): upgrade evalbot")
        raise ContractError(f"schema {schema!r}: no upgrade path to {RESULTS_SCHEMA!r}")
    out: dict[str, Any] = json.loads(json.dumps(doc))  # a deep copy of plain JSON
    if isinstance(out.get("correctness"), dict):
        out["correctness"].setdefault("path", "")
    if isinstance(out.get("box"), dict):
        out["box"].setdefault("name", "")
    for cell in out.get("cells") or []:
        if isinstance(cell, dict):
            cell.setdefault("stopped", "")
    for failure in out.get("failures") or []:
        if isinstance(failure, dict):
            failure.setdefault("log_tail", "")
    return out


def load(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ContractError(f"{path}: not a readable results file: {exc}") from exc
    return validate(doc)
