"""The verdict's contract (engine/contract/verdict.py): its one JSON form reproduces every graded
verdict exactly, and what is not a verdict of this version is refused by name before it is
stored or published (issue 54)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.errors import EvalbotError
from evalbot.engine.contract import verdict as contract
from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.results import upgrade, validate
from evalbot.engine.contract.verdict import VERDICT_SCHEMA, Verdict, check
from evalbot.grading.policy import load_labels
from evalbot.report.publication import graded, write_run
from evalbot.store.jobs import Store

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = sorted((ROOT / "tests" / "data").rglob("*.results.json"))
POLICY = load_labels(ROOT / "labels.yaml").policy("default")


def _verdict(name: str = "comments/demo-faster") -> dict[str, Any]:
    doc = json.loads((ROOT / "tests" / "data" / f"{name}.results.json").read_text())
    return graded(validate(upgrade(doc)), POLICY)


def test_every_graded_fixture_reads_back_to_the_same_bytes() -> None:
    read = 0
    for path in FIXTURES:
        try:
            verdict = graded(validate(upgrade(json.loads(path.read_text()))), POLICY)
        except EvalbotError:
            continue  # refused fixtures: tests/test_verdict_golden.py pins them
        again = Verdict.from_json(verdict).to_json()
        assert json.dumps(again, sort_keys=True) == json.dumps(verdict, sort_keys=True), path
        read += 1
    assert read >= 30


def _broken(change: str) -> dict[str, Any]:
    doc = copy.deepcopy(_verdict())
    if change == "schema":
        doc["schema"] = "evalbot.verdict/0"
    elif change == "unknown":
        doc["_box_s"] = 12.0
    elif change == "missing":
        del doc["cells"]
    elif change == "kind":
        doc["kind"] = "faster"
    elif change == "headline":
        doc["labels"] = ["eval:S", *doc["labels"]]
    elif change == "cell":
        del doc["cells"][0]["decision"]
    elif change == "provenance":
        del doc["provenance"]["head_sha"]
    return doc


@pytest.mark.parametrize("change, named", [
    ("schema", "schema 'evalbot.verdict/0'"), ("unknown", "unknown field '_box_s'"),
    ("missing", "missing 'cells'"), ("kind", "verdict.kind 'faster'"),
    ("headline", "first of its labels"), ("cell", "cells[0]: needs a key and a decision"),
    ("provenance", "missing 'head_sha'")])
def test_what_is_not_a_verdict_is_refused_by_name(change: str, named: str) -> None:
    with pytest.raises(ContractError, match=named.replace("[", r"\[").replace("]", r"\]")):
        check(_broken(change))


def test_a_forged_verdict_is_neither_stored_nor_published(tmp_path: Path) -> None:
    """A verdict that claims a tier its labels do not carry reaches neither the store nor the
    run folder: the store keeps the job running, the folder stays empty."""
    store = Store(tmp_path / "s.sqlite3")
    job = store.enqueue("o/r", 1, "b" * 40, "default")
    store.lease("w", 60.0)
    forged = _broken("headline")
    with pytest.raises(ContractError):
        store.finish(job.id, "w", forged, {})
    assert store.get(job.id).state == "running" and store.history() == []
    with pytest.raises(ContractError):
        write_run(tmp_path / "run", forged, "comment")
    assert not (tmp_path / "run").exists()
    assert _verdict()["schema"] == VERDICT_SCHEMA


def test_a_verdict_an_older_evalbot_stored_is_published_again_as_it_was(tmp_path: Path) -> None:
    """Main moves and a stored verdict is published again: one from before `witnesses` and
    `correctness_guards` (and with no schema) passes once upgraded, its own fields untouched; a
    stored document that is no verdict still does not."""
    old = {k: v for k, v in _verdict().items()
           if k not in ("witnesses", "correctness_guards", "schema")}
    check(contract.upgrade(old))
    assert {k: contract.upgrade(old)[k] for k in old} == old
    with pytest.raises(ContractError, match="missing 'provenance'"):
        check(contract.upgrade({k: v for k, v in old.items() if k != "provenance"}))
