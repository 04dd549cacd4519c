"""The verdict: what the bot concludes of one evaluation, as it is signed, stored and published.

Beside the results it is graded from (results.py), and like them versioned and checked where it
crosses a boundary: the store validates what it keeps, the run folder, GitHub and the shadow log
what they publish. `Verdict` is the frozen object; `to_json` its one JSON form (the bytes signed,
stored and published: audit/signing.py), `from_json` reads one back and refuses, by name, what
is not a verdict of this version. evalbot/grading/grade.py builds the graded ones and
evalbot/evaluation/evaluate.py the ones of an evaluation that never produced results, both here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .checks import ContractError

VERDICT_SCHEMA = "evalbot.verdict/1"
KINDS = ("improved", "neutral", "inconclusive", "regressed", "incorrect", "spoofed",
         "infra-error", "build-failed", "crashed", "timeout")
PROVENANCE = ("job_id", "base_sha", "head_sha", "policy")  # what every verdict says of its run
# key -> (the JSON type, may it be null); cells, models and the rest are read by their readers
_FIELDS: dict[str, tuple[type, bool]] = {
    "schema": (str, False), "kind": (str, False), "headline": (str, False),
    "labels": (list, False), "tier": (str, True), "best_cell": (str, True),
    "context_label": (str, True), "regression_labels": (list, False), "models": (list, False),
    "cells": (list, False), "correctness": (dict, False), "correctness_guards": (list, False),
    "failures": (list, False), "provenance": (dict, False), "reasons": (list, False),
    "witnesses": (list, False)}
_LATER = ("signature", "waiver")  # added after grading: audit/signing.py, grading/overrides.py


@dataclass(frozen=True)
class Verdict:
    kind: str
    headline: str
    labels: tuple[str, ...]
    cells: tuple[Mapping[str, Any], ...]
    correctness: Mapping[str, Any]
    failures: tuple[Mapping[str, Any], ...]
    provenance: Mapping[str, Any]
    reasons: tuple[str, ...] = ()
    tier: str | None = None
    best_cell: str | None = None
    context_label: str | None = None
    regression_labels: tuple[str, ...] = ()
    models: tuple[Mapping[str, Any], ...] = ()
    correctness_guards: tuple[Mapping[str, Any], ...] = ()
    witnesses: tuple[Mapping[str, Any], ...] = ()
    later: Mapping[str, Any] = field(default_factory=dict)  # signature, waiver

    def to_json(self) -> dict[str, Any]:
        """The verdict as a JSON document (fresh lists and the very mappings it holds)."""
        doc: dict[str, Any] = {"schema": VERDICT_SCHEMA}
        for key in _FIELDS:
            if key != "schema":
                value = getattr(self, key)
                doc[key] = list(value) if isinstance(value, tuple) else value
        return {**doc, **self.later}

    @classmethod
    def from_json(cls, doc: Any) -> Verdict:
        check(doc)
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                  for k, v in doc.items() if k in _FIELDS and k != "schema"}
        return cls(**values, later={k: doc[k] for k in _LATER if k in doc})


def upgrade(doc: Any) -> Any:
    """A verdict an older evalbot stored, in this version's shape for reading: the lists and
    nulls it predates (`witnesses`, `correctness_guards`, ...) added empty, the rest as stored.
    For what is published again from the store (a verdict republished when main moves); what is
    stored now is checked as it is."""
    if not isinstance(doc, dict):
        return doc
    absent: dict[str, Any] = {k: [] if kind is list else None
                              for k, (kind, nullable) in _FIELDS.items()
                              if k not in doc and (kind is list or nullable)}
    return {"schema": VERDICT_SCHEMA, **absent, **doc}


def validate(doc: Any) -> dict[str, Any]:
    """The document itself, once it has passed `check`."""
    check(doc)
    verdict: dict[str, Any] = doc
    return verdict


def check(doc: Any) -> None:
    """A verdict of this version, or a ContractError that names the first thing wrong."""
    if not isinstance(doc, dict):
        raise ContractError(f"verdict: expected an object, got {type(doc).__name__}")
    if doc.get("schema") != VERDICT_SCHEMA:
        raise ContractError(f"verdict: schema {doc.get('schema')!r}, this evalbot reads "
                            f"{VERDICT_SCHEMA!r}")
    unknown = sorted(set(doc) - set(_FIELDS) - set(_LATER))
    if unknown:
        raise ContractError(f"verdict: unknown field {unknown[0]!r}")
    for key, (kind, nullable) in _FIELDS.items():
        if key not in doc:
            raise ContractError(f"verdict: missing {key!r}")
        if not (isinstance(doc[key], kind) or nullable and doc[key] is None):
            raise ContractError(f"verdict.{key}: expected {kind.__name__}"
                                f"{' or null' if nullable else ''}, got {doc[key]!r:.60}")
    _check_values(doc)


def _check_values(doc: dict[str, Any]) -> None:
    if doc["kind"] not in KINDS:
        raise ContractError(f"verdict.kind {doc['kind']!r}: expected one of {', '.join(KINDS)}")
    labels = doc["labels"]
    if not labels or labels[0] != doc["headline"] or not doc["headline"].startswith("eval:"):
        raise ContractError(f"verdict: headline {doc['headline']!r} must be an eval: label and "
                            f"the first of its labels")
    for key in ("labels", "regression_labels", "reasons"):
        if not all(isinstance(v, str) for v in doc[key]):
            raise ContractError(f"verdict.{key}: every entry must be a string")
    for key in ("models", "cells", "correctness_guards", "failures", "witnesses"):
        if not all(isinstance(v, dict) for v in doc[key]):
            raise ContractError(f"verdict.{key}: every entry must be an object")
    for i, cell in enumerate(doc["cells"]):
        if not isinstance(cell.get("key"), str) or not isinstance(cell.get("decision"), str):
            raise ContractError(f"verdict.cells[{i}]: needs a key and a decision")
    if not isinstance(doc["correctness"].get("decision"), str):
        raise ContractError("verdict.correctness: needs a decision")
    missing = [k for k in PROVENANCE if not isinstance(doc["provenance"].get(k), str)]
    if missing:
        raise ContractError(f"verdict.provenance: missing {missing[0]!r}")
