"""What evalbot publishes: one rule for every published file, and the one way to write them.

Published are the PR comment (`comment.md`, and the same text on GitHub), `verdict.json`,
`labels.txt`, the run's `results.json` (the out folder's and the dashboard's `runs/<job>/` copy)
and the dashboard's pages. Every writer of one goes through here: `graded` makes the verdict
that is signed, stored and published; `render_comment` renders from `public_verdict` and
`public_results` alone; `write_run` writes a run's folder; the dashboard reads `public_row`.

The rule (issue 45). A hostile head chooses every byte it prints, and every digit of its rates:
- Per cell, all published files together carry at most one head figure: its level (the
  geometric mean of the pairs that decided), to 3 significant digits, and only for a cell the
  bot believes. No sample of the head's is published, nor its witness seconds, greedy tokens,
  error strings or artifact hashes; main's samples are.
- Every other number the head's runs can steer (changes, bounds, gains, seconds, sds, p-values,
  claimed savings, counts of tokens it chose) has 3 significant digits, in text too.
- A failure reads as a fixed sentence chosen by its stage, side and kind (`failure_text`): never
  the PR's bytes, never an exit status, never a log tail.
- Model files are named by file name; no path of the box is published.
The raw results (full precision, every sample, log tails) are the operator's: the store keeps
them, and the out folder keeps them under `private/` (0700), which nothing publishes.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from evalbot.engine.contract.verdict import validate as validate_verdict
from evalbot.grading.grade import grade
from evalbot.grading.policy import Policy
from evalbot.grading.published import believed
from evalbot.report.failure_text import public_failure, reason_of
from evalbot.report.numbers import round_text, sig, steerable
from evalbot.report.public_results import public_results

# The files of a run's out folder that may be published, and where the raw ones are kept.
PUBLISHED = ("comment.md", "verdict.json", "labels.txt", "results.json")
PRIVATE = "private"  # out/private/: the harness's raw results.json (and a pooled one)
# A cell's figures that come from the head's samples: nothing of them for a cell not believed.
CHANGE = ("speedup", "lo", "hi", "sim_lo", "sim_hi", "eq_lo", "eq_hi", "tier_gain",
          "witness_lo", "witness_gain", "witness_gain_hi")
# Numbers of our own that keep their precision: main's levels, the profile's and the policy's.
OURS_IN_CELL = ("base_median", "base_gmean", "sd_floor", "anchor", "ctx", "pairs", "looks",
                "dropped_pairs")
OURS_IN_CORRECTNESS = ("floors", "margin", "kl_margin", "seed", "tokens", "chunks", "looks",
                       "depths", "base")
# Counts a head chooses (tokens it got right or wrong, greedy tokens it printed).
CHOSEN_COUNTS = ("head_only_right", "base_only_right", "compared", "mismatches")


def _number(x: Any) -> Any:
    """A number the head's runs can steer, as it may be published (a count stays an int)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return x
    return int(sig(float(x))) if isinstance(x, int) else steerable(x)


def _round_tree(doc: Any, keep: tuple[str, ...] = ()) -> Any:
    """Every float of a JSON tree to 3 significant digits, the keys in `keep` (at its top
    level) untouched; chosen counts rounded too, wherever they are."""
    if isinstance(doc, dict):
        return {k: v if k in keep else
                _number(v) if k in CHOSEN_COUNTS else _round_tree(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_round_tree(v) for v in doc]
    if isinstance(doc, float):
        return _number(doc)
    if isinstance(doc, str):
        return round_text(doc)
    return doc


def _cell(cell: dict[str, Any]) -> dict[str, Any]:
    out = _round_tree(cell, keep=OURS_IN_CELL)
    head = "head_gmean" if cell.get("head_gmean") is not None else "head_median"
    level = cell.get(head)
    out["head_gmean"] = out["head_median"] = None
    if not believed(cell):  # grading's judgement (evalbot/grading/published.py)
        out.update({k: None for k in CHANGE if k in out}, compat=None, believed=False)
        return out
    out["believed"] = True
    out[head] = sig(float(level)) if isinstance(level, (int, float)) else None
    return out


def _correctness(section: Any) -> Any:
    if not isinstance(section, dict):
        return section
    return _round_tree(section, keep=OURS_IN_CORRECTNESS)


def _provenance(prov: dict[str, Any]) -> dict[str, Any]:
    out = dict(prov)
    out["models"] = [model_entry(m) for m in prov.get("models") or []]
    if "builds" in prov:
        out["builds"] = _round_tree(prov["builds"])
    if "timing" in prov:
        out["timing"] = _round_tree(prov["timing"])
    return out


def model_entry(model: Any) -> Any:
    """A model as published: its file by name, never the box's path to it."""
    if not isinstance(model, dict):
        return model
    out = dict(model)
    if "path" in out:
        out["path"] = PurePosixPath(str(out["path"])).name
    return out


def public_verdict(verdict: Mapping[str, Any]) -> dict[str, Any]:
    """The verdict as it may be published (idempotent). A signature stays only where the rule
    changed nothing: a verdict stored before the rule cannot keep a signature of other bytes."""
    unsigned = {k: copy.deepcopy(v) for k, v in verdict.items() if k != "signature"}
    out = dict(unsigned)
    out["cells"] = [_cell(c) for c in unsigned.get("cells") or []]
    out["witnesses"] = _round_tree(unsigned.get("witnesses") or [])
    out["correctness"] = _correctness(unsigned.get("correctness"))
    out["correctness_guards"] = [_correctness(g) for g in unsigned.get("correctness_guards") or []]
    out["failures"] = [public_failure(f) for f in unsigned.get("failures") or []]
    out["reasons"] = [reason_of(out["failures"][0])] if out["failures"] else \
        [round_text(str(r)) for r in unsigned.get("reasons") or []]
    if isinstance(unsigned.get("provenance"), dict):
        out["provenance"] = _provenance(unsigned["provenance"])
    if "signature" in verdict and _same(out, unsigned):
        out["signature"] = verdict["signature"]
    return out


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def graded(results: dict[str, Any], policy: Policy) -> dict[str, Any]:
    """The verdict of a results document as evalbot signs, stores and publishes it."""
    return public_verdict(grade(results, policy))


def public_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A store history row as the dashboard may show it: its verdict and results published."""
    return {**row, "verdict": public_verdict(row["verdict"]),
            "results": public_results(row.get("results") or {})}


def write_run(out: Path, verdict: Mapping[str, Any], comment: str,
              results: Mapping[str, Any] | None = None) -> None:
    """A run's published files: comment.md, verdict.json, labels.txt and, with results, the
    results as they may be published (the raw ones stay under private/)."""
    shown = validate_verdict(public_verdict(verdict))
    out.mkdir(parents=True, exist_ok=True)
    (out / "verdict.json").write_text(json.dumps(shown, indent=2, sort_keys=True) + "\n")
    (out / "comment.md").write_text(comment)
    (out / "labels.txt").write_text(labels_text(shown))
    if results:
        (out / "results.json").write_text(
            json.dumps(public_results(results), indent=1, sort_keys=True) + "\n")


def labels_text(verdict: Mapping[str, Any]) -> str:
    return "\n".join(verdict["labels"]) + "\n"


def private_dir(out: Path) -> Path:
    """out/private/, the harness's raw results: the operator's alone (0700), never published."""
    path = out / PRIVATE
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def keep_raw(out: Path, name: str, doc: Mapping[str, Any]) -> Path:
    """Write a raw document (a pooled results file) under out/private/."""
    path = private_dir(out) / name
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return path
