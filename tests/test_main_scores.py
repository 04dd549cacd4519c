"""Main's scores cached on the box per build of main (engine/scoring/main_scores.py), through the real
correctness scoring (engine.scoring.correctness.score with real score processes): the second
evaluation against the same build of main runs no score process for main and reaches the same
section; the head is always scored; another build of main, a tampered entry or another device is
scored again; the entries are the harness's alone."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.settings import REPO_ROOT
from evalbot.engine.contract.integrity import file_sha256
from evalbot.engine.contract.shared.segments import chunk_looks, deep_chunks
from evalbot.engine.scoring.correctness import score
from evalbot.engine.scoring.main_scores import FOLDER
from evalbot.engine.scoring.tokens import speed_tokens
from evalbot.engine.sides.build import Built
from evalbot.grading.correctness_policy import critical_values, decide, deep_critical
from evalbot.grading.policy import load_labels
from tests.test_correctness_deep import SCORER
from tests.test_tokenize import _job, demo  # noqa: F401  (fixture)

POLICY = load_labels(REPO_ROOT / "labels.yaml").policy("default")
DEVICE = "gpu NVIDIA H100 80GB HBM3, 580.159.04"


def _built(folder: Path, side: str, mode: str, engine: str) -> Built:
    folder.mkdir(parents=True, exist_ok=True)
    if mode:
        (folder / "mode").write_text(mode)
    (folder / "engine.bin").write_text(engine)  # the artifact main's cache is keyed by
    return Built(side, "0" * 40, True, 0.0, False, folder,
                 {"engine.bin": file_sha256(folder / "engine.bin")})


class Box:
    """One box's cache folder; each evaluation gets its own job directory."""

    def __init__(self, demo: Any, tmp_path: Path) -> None:  # noqa: F811
        stub = tmp_path / "scorer.py"
        stub.write_text(SCORER)
        job = _job(demo, tmp_path, [])
        assert job.correctness is not None
        argv = [sys.executable, str(stub), "{tokens}", "{out}", "{topk}", "{build}"]
        spec = replace(job.correctness, score_argv=argv, reference_argv=argv, long_score_tokens=100)
        spec = replace(spec, critical=critical_values(chunk_looks(spec, spec.looks)),
                       deep_critical=deep_critical(spec.looks, deep_chunks(spec)))
        self.job = replace(job, correctness=spec, cache_dir=str(tmp_path / "cache"))
        self.root, self.runs = tmp_path, 0

    def evaluate(self, head_mode: str = "", main: str = "main 1",
                 device: str = DEVICE) -> tuple[dict[str, Any], Path]:
        self.runs += 1
        run = self.root / f"run{self.runs}"
        built = {"base": _built(run / "base", "base", "", main),
                 "head": _built(run / "head", "head", head_mode, f"head {self.runs}")}
        jobdir = run / "job"
        jobdir.mkdir()
        speed_tokens(jobdir, self.job, REPO_ROOT)
        return score(self.job, built, jobdir, REPO_ROOT, device=device), jobdir

    def entries(self) -> list[Path]:
        return [p for p in (self.root / "cache" / FOLDER).rglob("*.json")
                if p.name != "manifest.json"]


def _ran(jobdir: Path, side: str) -> bool:
    return any((jobdir / "logs").glob(f"score-{side}-*.log"))


@pytest.fixture
def box(demo: Any, tmp_path: Path) -> Box:  # noqa: F811
    return Box(demo, tmp_path)


def test_the_second_evaluation_against_main_runs_no_score_process_for_main(box: Box) -> None:
    first, jobdir = box.evaluate()
    windows = len(first["windows"])
    assert first["main_scores"] == {"cached": 0, "scored": windows} and _ran(jobdir, "base")
    second, jobdir = box.evaluate()
    assert second["main_scores"] == {"cached": windows, "scored": 0}
    assert not _ran(jobdir, "base") and _ran(jobdir, "head")  # the head is always scored
    same = ("chunks", "looks", "identical", "stopped", "windows")
    assert {k: second[k] for k in same} == {k: first[k] for k in same}
    assert second["identical"] and second["stopped"] == "identical"


def test_a_damaged_head_is_rejected_alike_against_cached_main(box: Box) -> None:
    fresh, _ = box.evaluate("damage 923 1023 10")
    cached, jobdir = box.evaluate("damage 923 1023 10")
    assert not _ran(jobdir, "base") and cached["main_scores"]["scored"] == 0
    assert cached["chunks"] == fresh["chunks"]
    assert decide(cached, POLICY.correctness)["decision"] == "reject"


def test_only_mains_runs_fill_the_cache(box: Box) -> None:
    """A head's rows are never cached, so nothing a head prints reaches a later evaluation's
    main; a wrong head beside a clean main leaves main's rows alone."""
    section, _ = box.evaluate("damage 0 100000 1")
    assert len(box.entries()) == len(section["windows"])
    for entry in box.entries():
        rows = json.loads(entry.read_text())
        assert all(r["argmax"] == r["top"][0][0] for r in rows)
    assert all(p.stat().st_mode & 0o077 == 0 for p in box.entries())  # the harness's alone
    again, _ = box.evaluate()
    assert again["identical"]  # main's cached rows are main's, not the wrong head's


@pytest.mark.parametrize("other", [{"main": "main 2"}, {"device": "gpu NVIDIA H200, 580.159.04"}],
                         ids=["another build of main", "another device"])
def test_what_mains_rows_depend_on_makes_a_miss(box: Box, other: dict[str, str]) -> None:
    box.evaluate()
    section, jobdir = box.evaluate(**other)
    assert section["main_scores"]["cached"] == 0 and _ran(jobdir, "base")


def test_a_tampered_entry_is_scored_again(box: Box) -> None:
    first, _ = box.evaluate()
    entry = box.entries()[0]
    entry.write_text(json.dumps(json.loads(entry.read_text())[::-1]))  # behind the manifest
    again, jobdir = box.evaluate()
    assert again["main_scores"] == {"cached": len(first["windows"]) - 1, "scored": 1}
    assert _ran(jobdir, "base") and again["chunks"] == first["chunks"]
