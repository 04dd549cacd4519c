"""The sparkinfer profile's correctness on the timed prefill path (issue 32): evalbot's witness
tool's `score` mode (engine/sparkinfer/witness.cpp), compiled against the stub sparkinfer tree
(tests/data/sparkinfer_stub: its "logits" are a hash of the state, so a fill that leaves another
state scores as wrong), driven by engine/llamacpp/score.py --bin and scored by the real harness
(engine.scoring.correctness.score: proc.run, the sandbox's output directory, the dump checks),
then decided by the bot's correctness_policy.decide.

The attack: a head whose forward_token is right and whose prefill_batched leaves a wrong KV
state (it drops the first prompt id; the kind of change a prefill PR makes for speed). Scored as
the profile scored before (qwen3_gguf_score, teacher-forced through forward_token) it is inert;
scored as the profile scores now it is REJECTed.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalbot.config.settings import REPO_ROOT
from evalbot.engine.contract.shared.segments import chunk_looks, deep_chunks
from evalbot.engine.measure.gpu import device_identity
from evalbot.engine.sandbox import proc
from evalbot.engine.scoring.correctness import score
from evalbot.engine.scoring.tokens import ScoreFailure, speed_tokens
from evalbot.engine.sides.build import Built
from evalbot.evaluation.profile import load_profile
from evalbot.grading.correctness_policy import critical_values, decide, deep_critical
from evalbot.grading.policy import load_labels
from tests.test_sparkinfer_witness import TOOL, VOCAB, model, run_build, stub_tree, toolkit  # noqa: F401
from tests.test_tokenize import _job, demo  # noqa: F401  (fixture)

POLICY = load_labels(REPO_ROOT / "labels.yaml").policy("default")
SCORE_PY = REPO_ROOT / "engine" / "llamacpp" / "score.py"
RUNTIME = "src/stub_runtime.cpp"
SPLIT = 64  # the demo's short windows are 128 ids: half token path, half after a batched fill

# The stub's model in numpy (tests/data/sparkinfer_stub/src/stub_runtime.cpp): the state after
# each id, its logits (a hash in [0, 1) per id, the top at 2, its runner-up at 2 - the state's
# gap) and top-k, teacher-forced from position 0. The test's trusted reference.
REFERENCE = r"""import json, sys
import numpy as np
M = np.uint64
def fmix(k):
    k = k ^ (k >> M(33)); k = k * M(0xff51afd7ed558ccd)
    k = k ^ (k >> M(33)); k = k * M(0xc4ceb9fe1a85ec53)
    return k ^ (k >> M(33))
model, tokens, topk, out = sys.argv[1:5]
vocab = int(dict(ln.split("=") for ln in open(model).read().split())["vocab"])
ids_v = np.arange(vocab, dtype=np.uint64) * M(0x9e3779b97f4a7c15)
doc = json.load(open(tokens))
windows, froms = (doc["windows"], doc["score_from"]) if isinstance(doc, dict) else \
    (doc, [0] * len(doc))
rows = []
with np.errstate(over="ignore"):
    for w, first in zip(windows, froms):
        h, top, am = np.array([0x5157454e3335], dtype=np.uint64), [], []
        for pos, i in enumerate(w[:-1]):
            h = fmix(h ^ fmix(np.array([i * 0x100000001b3 + pos], dtype=np.uint64)))
            lg = (fmix(h ^ ids_v) % M(1000)).astype(np.float32) / np.float32(1000)
            g = fmix(h + M(0x9e37))[0], fmix(h + M(0x51))[0], fmix(h + M(0x7a9))[0]
            best = int(g[0] % M(vocab))
            second = int((M(best) + M(1) + g[1] % M(vocab - 1)) % M(vocab))
            lg[best] = 2.0
            lg[second] = np.float32(2.0) - np.float32(int(g[2] % M(100))) / np.float32(1000)
            lg = lg.astype(np.float64)
            lse = lg.max() + np.log(np.exp(lg - lg.max()).sum())
            order = np.argsort(-lg, kind="stable")[: int(topk)]
            if pos >= first:  # a window scored from `first` gives positions first.. only
                top.append([[int(k), float(lg[k] - lse)] for k in order])
                am.append(int(order[0]))
        rows.append({"top": top, "argmax": am})
json.dump({"windows": rows}, open(out, "w"))
"""


def _head_tree(root: Path, old: str, new: str) -> Path:
    """A stub tree whose library has one source change (a head's commit)."""
    tree = stub_tree(root)
    text = (tree / RUNTIME).read_text()
    assert old in text
    (tree / RUNTIME).write_text(text.replace(old, new))
    return tree


HEADS = {  # name -> the head's change to the stub library
    "main": ("", ""),
    # prefill_batched drops the first prompt id from the state it leaves; forward_token is right
    "prefill-broken": ("const int skip = e ? atoi(e) : 0;", "const int skip = e ? atoi(e) : 1;"),
    # a kernel that writes a NaN into the logits
    "nan": ("if (nan && nan[0] == '1' && top < n)", "if (top < n)"),
}


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory, toolkit: Path) -> dict[str, Path]:  # noqa: F811
    out = {}
    for name, (old, new) in HEADS.items():
        root = tmp_path_factory.mktemp(name) / "tree"
        tree = _head_tree(root, old, new) if old else stub_tree(root)
        done = run_build(tree, toolkit)
        assert done.ok and "witness tool: built" in done.output, done.output
        out[name] = tree
    return out


def _score_argv(mode: str) -> list[str]:
    """The profile's score command (the new mode), or the one it had (qwen3_gguf_score)."""
    if mode == "tool":
        return ["{python}", "{harness}/engine/llamacpp/score.py", "--bin", f"{{build}}/{TOOL}",
                "--split", str(SPLIT), "--model", "{model}", "--tokens", "{tokens}",
                "--topk", "{topk}", "--out", "{out}"]
    return ["{python}", "{harness}/engine/llamacpp/score.py", "--per-window",
            "{build}/build/runtime/qwen3_gguf_score", "--model", "{model}",
            "--tokens", "{tokens}", "--topk", "{topk}", "--out", "{out}"]


def _evaluate(demo: Any, tmp_path: Path, trees: dict[str, Path], head: str,  # noqa: F811
              mode: str = "tool") -> dict[str, Any]:
    """main against `head` through the harness's scoring, on the demo's corpus and plan (2 long
    windows of 1024 ids, deep = their last 100 positions; short windows of 128)."""
    ref = tmp_path / "reference.py"
    ref.write_text(REFERENCE)
    job = _job(demo, tmp_path, [])
    assert job.correctness is not None
    spec = replace(job.correctness, score_argv=_score_argv(mode), topk=8, long_score_tokens=100,
                   long_scored="deep" if mode == "tool" else "all",
                   reference_argv=[sys.executable, str(ref), "{model}", "{tokens}", "{topk}",
                                   "{out}"])
    spec = replace(spec, critical=critical_values(chunk_looks(spec, spec.looks)),
                   deep_critical=deep_critical(spec.looks, deep_chunks(spec)))
    stub_model = model(tmp_path)
    job = replace(job, correctness=spec, env={"SPARKINFER_KV_INT8": "1"},
                  models=[replace(m, path=str(stub_model)) for m in job.models])
    built = {side: Built(side, "0" * 40, True, 0.0, False, trees[name])
             for side, name in (("base", "main"), ("head", head))}
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    speed_tokens(jobdir, job, REPO_ROOT)
    return score(job, built, jobdir, REPO_ROOT, device=device_identity())


def test_main_scores_as_the_reference_on_both_fills(demo: Any, tmp_path: Path,  # noqa: F811
                                                   trees: dict[str, Path]) -> None:
    section = _evaluate(demo, tmp_path, trees, "main")
    assert section["identical"] and section["long_scored"] == "deep"
    verdict = decide(section, POLICY.correctness)
    assert verdict["decision"] == "inert" and not verdict["drift"]
    assert verdict["base"]["top1"]["mean"] == 1.0  # the faithful batched fill: the reference's
    # long windows: their 100 deep positions only, in deep chunks (no shallow pieces)
    assert {c["kind"] for c in section["chunks"]} == {"deep", "short"}
    assert sum(c["positions"] for c in section["chunks"] if c["kind"] == "deep") == 200
    assert any("after the score command's fill of the rest" in n for n in verdict["notes"])
    # the tool's last lines (score.py keeps the tail of its stderr): a short window's split
    log = (tmp_path / "job" / "logs" / "score-head-0.log").read_text()
    assert f"stub: prefill_batched n={SPLIT} " in log
    assert "ids=128 from=0 fill=batched after_fill=63 " in log
    # each side's score processes are timed (docs/gpu-e2e.md gives correctness's cost from them)
    assert set(section["seconds"]) == {"reference", "base", "head"}
    assert section["seconds"]["base"] > 0 and section["seconds"]["head"] > 0


def test_a_head_whose_batched_prefill_is_wrong_is_rejected(demo: Any, tmp_path: Path,  # noqa: F811
                                                          trees: dict[str, Path]) -> None:
    section = _evaluate(demo, tmp_path, trees, "prefill-broken")
    verdict = decide(section, POLICY.correctness)
    assert verdict["decision"] == "reject"
    assert verdict["deep"]["reject"]  # the positions after the 923-id batched fill
    short = [c for c in section["chunks"] if c["kind"] == "short"]
    # positions 0..63 of a short window are the token path (right), 64..126 follow the fill
    assert all(c["head_top1"] <= SPLIT + 1 for c in short)
    assert all(c["base_top1"] == c["positions"] for c in short)


def test_the_score_it_replaces_passes_that_head(demo: Any, tmp_path: Path,  # noqa: F811
                                               trees: dict[str, Path]) -> None:
    """The profile's score before: qwen3_gguf_score teacher-forces every position through
    forward_token, so the broken batched prefill never runs: the head is inert."""
    section = _evaluate(demo, tmp_path, trees, "prefill-broken", mode="qwen3_gguf_score")
    assert section["identical"]
    assert decide(section, POLICY.correctness)["decision"] == "inert"


def test_nan_logits_are_refused_with_the_sides_name(demo: Any, tmp_path: Path,  # noqa: F811
                                                   trees: dict[str, Path]) -> None:
    with pytest.raises(ScoreFailure) as err:
        _evaluate(demo, tmp_path, trees, "nan")
    assert err.value.side == "head" and err.value.kind == "crashed"
    assert err.value.log is not None
    assert "score failed: position 0: log-probability nan of token " in err.value.log.read_text()


def test_a_missing_position_is_refused(demo: Any, tmp_path: Path, trees: dict[str, Path],  # noqa: F811
                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    """The side's library runs inside the tool and may print anything: output that lacks a
    position (here the tool's output less one `S` line) is refused, never filled in."""
    tree = tmp_path_factory.mktemp("dropping") / "tree"
    import shutil
    shutil.copytree(trees["main"], tree)
    real = tree / (TOOL + ".real")
    (tree / TOOL).rename(real)
    (tree / TOOL).write_text(f"#!/bin/sh\n'{real}' \"$@\" | grep -v '^S i=70 '\n")
    (tree / TOOL).chmod(0o755)
    with pytest.raises(ScoreFailure) as err:
        _evaluate(demo, tmp_path, {**trees, "dropping": tree}, "dropping")
    assert err.value.side == "head"
    assert err.value.log is not None
    assert "expected i=70, got i=71" in err.value.log.read_text()


# ---- the tool's own input checks --------------------------------------------------------------

def _tool_run(tree: Path, tmp: Path, args: list[str]) -> proc.Finished:
    return proc.run([str(tree / TOOL), "score", str(model(tmp)), *args], cwd=tmp, timeout_s=60,
                    log=tmp / "score.log", env={"SPARKINFER_KV_INT8": "1"})


@pytest.mark.parametrize("windows, args, rc, error", [
    ("@4 1 2 3\n", [], 2, "[FAIL] score: window 0 has 3 ids scored from 4"),
    ("1 2 x 4\n", [], 2, "[FAIL] score: window 0 of "),
    (f"1 2 {VOCAB} 4\n", [], 2, f"[FAIL] score: window 0: id {VOCAB} is outside the vocabulary"),
    ("\n", [], 2, "[FAIL] score: no window in "),
    ("1 2 3\n", ["--split=x"], 64, "usage:"),
])
def test_malformed_windows_fail_with_the_reason(trees: dict[str, Path], tmp_path: Path, windows: str,
                                                args: list[str], rc: int, error: str) -> None:
    path = tmp_path / "w.txt"
    path.write_text(windows)
    done = _tool_run(trees["main"], tmp_path, ["4", str(path), *args])
    assert done.returncode == rc and error in done.output and "S i=" not in done.output


def test_score_py_reads_the_tool_through_the_harness_parser(trees: dict[str, Path],
                                                            tmp_path: Path) -> None:
    """score.py --bin on the tool: windows scored from F (a batched fill of F ids, then steps)
    and from 0 (--split), the dump equal to the numpy reference at the scored positions."""
    windows = [[(7 * i + 3) % VOCAB for i in range(40)], [(11 * i + 5) % VOCAB for i in range(30)]]
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"windows": windows, "score_from": [25, 0]}))
    out = tmp_path / "out.json"
    argv = [sys.executable, str(SCORE_PY), "--bin", str(trees["main"] / TOOL), "--split", "10",
            "--model", str(model(tmp_path)), "--tokens", str(tokens), "--topk", "5", "--out",
            str(out)]
    done = proc.run(argv, cwd=tmp_path, timeout_s=60, log=tmp_path / "score.log",
                    env={"SPARKINFER_KV_INT8": "1"})
    assert done.ok, done.output
    got = json.loads(out.read_text())["windows"]
    ref = tmp_path / "reference.py"
    ref.write_text(REFERENCE)
    (tmp_path / "all.json").write_text(json.dumps(windows))
    assert proc.run([sys.executable, str(ref), str(model(tmp_path)), str(tmp_path / "all.json"),
                     "5", str(tmp_path / "ref.json")], cwd=tmp_path, timeout_s=60,
                    log=tmp_path / "ref.log").ok
    want = json.loads((tmp_path / "ref.json").read_text())["windows"]
    assert [len(w["top"]) for w in got] == [14, 29]
    for g, w, f in zip(got, want, (25, 0), strict=True):
        assert g["argmax"] == w["argmax"][f:]
        assert np.allclose([[lp for _, lp in row] for row in g["top"]],
                           [[lp for _, lp in row] for row in w["top"][f:]], atol=2e-6)
    assert "stub: prefill_batched n=25 " in done.output and "stub: prefill_batched n=10 " in done.output


def test_the_profile_scores_through_the_tool() -> None:
    spec = load_profile("sparkinfer").correctness
    assert spec is not None and spec.long_scored == "deep" and spec.long_score_tokens == 256
    argv = list(spec.score_argv)
    assert argv[argv.index("--bin") + 1] == f"{{build}}/{TOOL}"
    assert TOOL in load_profile("sparkinfer").artifacts
    # the bot's critical values are for the chunks the harness cuts: 8 deep pieces per long
    # window and no shallow ones (28/96/224 windows: 42/110/238 chunks)
    from evalbot.grading.correctness_policy import job_correctness

    job = job_correctness(spec, POLICY.correctness, seed=0)
    assert job.long_scored == "deep" and chunk_looks(job, job.looks) == [42, 110, 238]
    assert deep_chunks(job) == 16


@pytest.mark.parametrize("value, tokens, problem", [
    ("bogus", 256, "'bogus': one of ['all', 'deep']"),
    ("deep", 0, "'deep' needs long_score_tokens >= 1"),  # with long windows (the profile's 2)
])
def test_a_long_scored_the_harness_cannot_cut_is_refused(tmp_path: Path, value: str, tokens: int,
                                                         problem: str) -> None:
    """A profile (and a job) that asks for deep-only long windows without deep positions, or for
    a way of scoring the harness does not know, is refused by name before any evaluation."""
    from evalbot.config.errors import ConfigError

    text = (REPO_ROOT / "evalbot" / "profiles" / "sparkinfer.yaml").read_text()
    assert "  long_score_tokens: 256\n  long_scored: deep\n" in text
    path = tmp_path / "p.yaml"
    path.write_text(text.replace("  long_score_tokens: 256\n  long_scored: deep\n",
                                 f"  long_score_tokens: {tokens}\n  long_scored: {value}\n"))
    with pytest.raises(ConfigError, match="long_scored") as err:
        load_profile(str(path))
    assert problem in str(err.value)


def test_a_job_with_deep_only_long_windows_and_no_deep_positions_is_refused() -> None:
    from evalbot.engine.contract.checks import ContractError
    from evalbot.engine.contract.job import _correctness

    doc = {"score_argv": ["x"], "reference_argv": ["y"], "seed": 1, "windows": 2,
           "window_tokens": 8, "long_windows": 1, "long_window_tokens": 64,
           "long_scored": "deep", "looks": [3], "critical": [4.0]}
    with pytest.raises(ContractError, match="long_scored"):
        _correctness(doc)
    spec = _correctness({**doc, "long_score_tokens": 8})
    assert spec is not None and spec.long_scored == "deep"
