"""Issue 32: the guard sees damage deep in the context and damage the first windows miss, main's
drift stops the evaluation, every guard model's outcome reaches the headline, and bad dumps are
refused by name. Each test attacks as a hostile (or broken) PR would, through the real harness
scoring (engine.scoring.correctness.score with real score processes) or the real grade()."""

from __future__ import annotations

import struct
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.settings import REPO_ROOT
from evalbot.engine.contract.shared.segments import chunk_looks, deep_chunks
from evalbot.engine.measure.gpu import device_identity
from evalbot.engine.scoring.correctness import score
from evalbot.engine.scoring.tokens import ScoreFailure, speed_tokens
from evalbot.engine.scoring.vocab import vocab_size
from evalbot.engine.sides.build import Built
from evalbot.grading.correctness_policy import critical_values, decide, deep_critical
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from tests.test_correctness_guards import inert, results
from tests.test_correctness_policy import chunks, section
from tests.test_tokenize import _job, demo  # noqa: F401  (fixture)

POLICY = load_labels(REPO_ROOT / "labels.yaml").policy("default")

# A score tool: right on every position (its argmax is the next id) unless the build it runs
# from holds a `damage` file "A B STEP": then, in windows of more than 1000 ids, every STEP-th
# position in [A, B) predicts the wrong id. `odd` files make it write something else at {out}.
SCORER = """import json, os, sys
tokens, out, topk, build = sys.argv[1:5]
doc = json.load(open(tokens))
windows, froms = (doc["windows"], doc["score_from"]) if isinstance(doc, dict) else \
    (doc, [0] * len(doc))
mode = open(os.path.join(build, "mode")).read() if os.path.exists(os.path.join(build, "mode")) else ""
if mode == "directory":
    os.mkdir(out); sys.exit(0)
if mode == "fifo":
    os.mkfifo(out); sys.exit(0)
a, b, step = map(int, mode.split()[1:]) if mode.startswith("damage") else (0, 0, 1)
shift = 300 if mode == "vocab" else 0
rows = []
for w, f in zip(windows, froms):
    top, am = [], []
    for i in range(f, len(w) - 1):
        right = w[i + 1] + shift
        wrong = len(w) > 1000 and a <= i < b and (i - a) % step == 0
        best = (right + 1) % 256 if wrong else right
        top.append([[best, -0.1]] + [[(best + j + 1) % 256, -4.0 - j] for j in range(int(topk))])
        am.append(best)
    rows.append({"top": top, "argmax": am})
json.dump({"windows": rows}, open(out, "w"))
"""


def _run(demo: Any, tmp_path: Path, head_mode: str, deep: int = 100) -> dict[str, Any]:  # noqa: F811
    stub = tmp_path / "scorer.py"
    stub.write_text(SCORER)
    job = _job(demo, tmp_path, [])
    assert job.correctness is not None
    argv = [sys.executable, str(stub), "{tokens}", "{out}", "{topk}", "{build}"]
    spec = replace(job.correctness, score_argv=argv, reference_argv=argv, long_score_tokens=deep)
    job = replace(job, correctness=replace(
        spec, critical=critical_values(chunk_looks(spec, spec.looks)),
        deep_critical=deep_critical(spec.looks, deep_chunks(spec))))
    built = {}
    for side, mode in (("base", ""), ("head", head_mode)):
        folder = tmp_path / side
        folder.mkdir()
        if mode:
            (folder / "mode").write_text(mode)
        built[side] = Built(side, "0" * 40, True, 0.0, False, folder)
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    speed_tokens(jobdir, job, REPO_ROOT)
    return score(job, built, jobdir, REPO_ROOT, device=device_identity())


def test_a_head_that_loses_10_points_only_deep_in_the_context_is_rejected(
        demo: Any, tmp_path: Path) -> None:  # noqa: F811
    # The demo's long windows are 1024 ids; their last 100 positions are the deep ones (context
    # 924 to 1023). Before: 200 deep tokens among 1,016 short ones, later looks adding more
    # short ones, and the loss was diluted into a pass.
    section_ = _run(demo, tmp_path, "damage 923 1023 10")
    verdict = decide(section_, POLICY.correctness)
    assert verdict["decision"] == "reject"
    assert verdict["deep"]["reject"] and verdict["deep"]["diff_top1"]["mean"] == pytest.approx(-0.1)
    assert any(r.startswith("at depth 924+, alone: top-1 -10.00 points") for r in verdict["reasons"])


def test_a_head_identical_in_the_first_windows_but_wrong_beyond_them_is_not_inert(
        demo: Any, tmp_path: Path) -> None:  # noqa: F811
    # Wrong only between context 129 and 900: no short window (128 ids) reaches it, and the
    # deep positions sit beyond it. Before: identical in round one, "inert", pass.
    section_ = _run(demo, tmp_path, "damage 128 900 5")
    assert not section_["identical"]
    verdict = decide(section_, POLICY.correctness)
    assert verdict["decision"] == "reject"
    assert verdict["diff_top1"]["hi"] < -POLICY.correctness.margin


def test_an_unchanged_head_is_inert_after_one_round(demo: Any, tmp_path: Path) -> None:  # noqa: F811
    section_ = _run(demo, tmp_path, "")
    assert section_["identical"] and section_["stopped"] == "identical"
    assert len(section_["looks"]) == 1 and decide(section_, POLICY.correctness)["decision"] == "inert"


@pytest.mark.parametrize("mode, problem", [
    ("vocab", "the PR's score dump is refused (head-0.json): window 0 position 0: token id "),
    ("directory", "the PR's score dump head-0.json is a directory, not a regular file"),
    ("fifo", "the PR's score dump head-0.json is a FIFO, not a regular file"),
])
def test_a_bad_dump_is_refused_with_its_file_and_problem(
        demo: Any, tmp_path: Path, mode: str, problem: str) -> None:  # noqa: F811
    with pytest.raises(ScoreFailure) as err:
        _run(demo, tmp_path, mode)
    assert err.value.side == "head" and err.value.kind == "unparsable"
    assert problem in err.value.message
    if mode == "vocab":  # the id, the model's vocabulary
        assert "is outside the model's vocabulary of 256 ids" in err.value.message


def _drifted(model: str, top1: float, kl: float, apart: int = 26) -> dict[str, Any]:
    """An inert head on a main off the reference, its windows `apart` / 256 points apart."""
    rows = chunks(10, 256, top1, 0, 0, kl_base=kl)
    for i, row in enumerate(rows):
        row["base_top1"] = row["head_top1"] = min(256, max(0, row["base_top1"] + (-1) ** i * apart))
    return section(rows, identical=True, model=model, floors={"top1": 0.98, "kl": 0.02})


def test_a_main_far_from_the_reference_stops_as_drift_not_a_pass() -> None:
    # llamacpp's main 5 points under its calibrated 0.98 floor, windows 7 points apart: the old
    # rule (main's whole two-sided interval past the floor) let the PR pass.
    verdict = decide(_drifted("m", 0.927, 0.01, apart=18), POLICY.correctness)
    assert verdict["drift"] and verdict["decision"] == "infra-error"
    assert verdict["reasons"][-1].startswith("the reference is unusable")


def test_a_main_at_its_calibrated_level_is_not_drift() -> None:
    verdict = decide(_drifted("m", 0.99, 0.01, apart=3), POLICY.correctness)
    assert not verdict["drift"] and verdict["decision"] == "inert"


def _inconclusive(model: str) -> dict[str, Any]:
    return section(chunks(112, 256, 0.93, 10, 13, spread=4), model=model)


@pytest.mark.parametrize("guard, headline, label", [
    (_inconclusive, "eval:inconclusive", "eval-qwen36:inconclusive"),
    (lambda m: _drifted(m, 0.73, 1.05), "eval:infra-error", "eval-qwen36:infra-error"),
])
def test_a_guard_models_outcome_reaches_the_headline_and_its_label(
        guard: Any, headline: str, label: str) -> None:
    doc = results(inert("qwythos-9b"), [guard("qwen3.6-35b-a3b")])
    doc["models"][0]["namespace"], doc["models"][1]["namespace"] = "eval-qwen35", "eval-qwen36"
    verdict = grade(doc, POLICY)
    assert verdict["headline"] == headline and verdict["tier"] is None
    assert label in verdict["labels"]
    assert any(r.startswith("qwen3.6-35b-a3b: ") for r in verdict["reasons"])


def _gguf(path: Path, tokens: int) -> None:
    """A GGUF header as llama.cpp writes one: a string key, then the token list."""
    def string(s: str) -> bytes:
        return struct.pack("<Q", len(s)) + s.encode()
    body = string("general.architecture") + struct.pack("<I", 8) + string("qwen35")
    body += string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, tokens)
    body += b"".join(string(f"t{i}") for i in range(tokens))
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + body)


def test_the_vocabulary_is_read_from_the_gguf(tmp_path: Path) -> None:
    _gguf(tmp_path / "m.gguf", 1000)
    assert vocab_size(str(tmp_path / "m.gguf")) == 1000
    (tmp_path / "other.bin").write_bytes(b"not a model")
    assert vocab_size(str(tmp_path / "other.bin")) is None  # unknown: only int32 is checked
