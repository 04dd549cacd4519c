"""evalbot's witness tool for sparkinfer (engine/sparkinfer/witness.cpp) and the build step that
compiles it after each side's engine build (engine/sparkinfer/build_witness.py), on a CPU.

The tool is compiled with the machine's g++ against a stub sparkinfer tree
(tests/data/sparkinfer_stub/: the part of qwen35.h the tool uses, and a library whose "model" is a
hash of the sequence so far, so every STEP id is checkable from Python and depends on every id
and position before it). It runs through the harness's own `engine.sandbox.proc.run` with
`engine.measure.witness.handoff_of` on a spec the contract parsed. A head whose headers no longer
build the tool gets a placeholder artifact: its witness fails, the cells it covers get no tier,
and nothing is an infra-error (through `build_side`, `Measurement._timed`, then `run_job` and the
grading). No wall-clock asserts: the one timed comparison (a real prefill saving confirmed) is
the bot's own statistics on a 4x saving.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalbot.engine.contract.job import parse_job
from evalbot.engine.contract.witness_spec import READY, WitnessSpec, parse_witness
from evalbot.engine.harness.steps import run_job
from evalbot.engine.measure import witness, witness_output
from evalbot.engine.measure.speed import Measurement
from evalbot.engine.sandbox import proc
from evalbot.engine.sides.build import build_side
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from tests.stub_engine import _git

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "tests" / "data" / "sparkinfer_stub"
BUILD = ROOT / "engine" / "sparkinfer" / "build_witness.py"
TOOL = "evalbot-out/evalbot-sparkinfer-witness"
VOCAB = 5000
DEFAULT = load_labels(ROOT / "labels.yaml").policy("default")
TIERS = {"eval:XL", "eval:L", "eval:M", "eval:S", "eval:XS"}

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


# ---- the stub's model, in Python (tests/data/sparkinfer_stub/src/stub_runtime.cpp) -------------

M64 = (1 << 64) - 1


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & M64
    return k ^ (k >> 33)


def argmaxes(ids: list[int], skip: int = 0) -> list[int]:
    """The stub's argmax after each position of `ids` filled from position 0 (the first `skip`
    left out of the state, as a prefill that skips them leaves it)."""
    h, out = 0x5157454E3335, []
    for pos, i in enumerate(ids):
        if pos >= skip:
            h = _fmix(h ^ _fmix((i * 0x100000001B3 + pos) & M64))
        out.append(_fmix((h + 0x9E37) & M64) % VOCAB)
    return out


def fill_ids(depth: int, seed: int = 0x5EED5A4C1F11) -> list[int]:
    """The decode mode's own ids at 0..depth+7 (witness.cpp `made_ids`: splitmix64)."""
    state, out = (seed ^ depth) & M64, []
    for _ in range(depth + 8):
        state = (state + 0x9E3779B97F4A7C15) & M64
        z = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        out.append((z ^ (z >> 31)) % min(VOCAB, 32000))
    return out


# ---- building -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def toolkit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in CUDA toolkit, outside any tree as a real one is: include/ and lib64/."""
    root = tmp_path_factory.mktemp("cuda")
    shutil.copytree(STUB / "cuda" / "include", root / "include")
    (root / "lib64").mkdir()
    subprocess.run(["g++", "-std=c++17", "-O1", "-shared", "-fPIC", f"-I{root / 'include'}", "-o",
                    str(root / "lib64" / "libcudart.so"), str(STUB / "cuda" / "cudart_stub.cpp")],
                   check=True)
    return root


def stub_tree(dest: Path, api_change: bool = False, speed: tuple[int, int] = (0, 0)) -> Path:
    """A copy of the stub tree; `api_change`: a head that renamed prefill_batched in the header
    and the library alike (the engine builds, evalbot's tool no longer does); `speed`: the
    library's microseconds of wall time per prefill token and per decode step."""
    shutil.copytree(STUB, dest, ignore=shutil.ignore_patterns("cuda"))
    if api_change:
        for rel in ("runtime/include/sparkinfer/models/qwen35.h", "src/stub_runtime.cpp"):
            text = (dest / rel).read_text()
            assert "prefill_batched(" in text
            (dest / rel).write_text(text.replace("prefill_batched(", "prefill_batched_ids("))
    (dest / "stub_speed.env").write_text(f"PREFILL_US={speed[0]}\nSTEP_US={speed[1]}\n")
    return dest


def run_build(tree: Path, toolkit: Path) -> proc.Finished:
    """The proposed profile build, as the harness runs a build (an isolated Python, the tree as
    cwd): the wrapper around the engine's own build command."""
    argv = [sys.executable, str(BUILD), "--tree", str(tree), "--", "/bin/sh", "build.sh"]
    return proc.run(argv, cwd=tree, timeout_s=300, log=tree.parent / f"{tree.name}-build.log",
                    env={"STUB_CUDA": str(toolkit)})


@pytest.fixture(scope="module")
def tool(tmp_path_factory: pytest.TempPathFactory, toolkit: Path) -> Path:
    tree = stub_tree(tmp_path_factory.mktemp("main") / "tree")
    done = run_build(tree, toolkit)
    assert done.ok, done.output
    assert "witness tool: built evalbot-out/evalbot-sparkinfer-witness" in done.output
    return tree / TOOL


def model(root: Path, dense: bool = True) -> Path:
    path = root / ("dense.gguf.txt" if dense else "moe.gguf.txt")
    path.write_text(f"vocab={VOCAB}\nblock_count=2\nhead_count_kv=2\nkey_length=8\n"
                    f"dense_ffn={int(dense)}\n")
    return path


def spec_of(mode: str, a: int, n: int) -> WitnessSpec:
    prefill = mode == "prefill"
    cell = f"m/prefill@{a}" if prefill else f"m/decode@{a}"
    return parse_witness({"name": f"{mode}-{a}", "argv": ["x"], "cells": {cell: a if prefill else n},
                          "prompt_tokens": a if prefill else 1, "steps": n,
                          "output": {"kind": "step_lines"}, "output_tokens": n + 1,
                          "clock": "handoff", "timeout_s": 60}, "w", {cell})


def ids_from(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1000) for _ in range(n)]


def run_tool(tool: Path, tmp: Path, argv: list[str], handoff: proc.Handoff | None,
             env: dict[str, str | None] | None = None) -> proc.Finished:
    """The tool as a witness process, in the profile's environment (int8 KV pinned; None
    removes a variable)."""
    env = {"SPARKINFER_KV_INT8": "1", **(env or {})}
    return proc.run([str(tool), *argv], cwd=tmp, timeout_s=60, log=tmp / "witness.log",
                    env={k: v for k, v in env.items() if v is not None}, handoff=handoff)


def split_at_ready(output: str) -> tuple[list[str], list[str]]:
    lines = output.splitlines()
    at = lines.index(READY)
    return lines[:at], lines[at + 1:]


# ---- the protocol -----------------------------------------------------------------------------

def test_prefill_runs_the_prompt_as_one_batch_then_one_step_per_id(tool: Path, tmp_path: Path) -> None:
    spec = spec_of("prefill", 16, 6)
    ids = ids_from(7, 22)
    done = run_tool(tool, tmp_path, ["prefill", str(model(tmp_path)), "16", "6"],
                    witness.handoff_of(spec, ids))
    assert done.ok and done.handoff_s is not None, done.output
    # the STEP ids: the argmax after the prompt (prefill_batched's own), then after each step;
    # each depends on every id and position before it, so on the state the batched prefill wrote
    assert witness_output.read_output_ids(done.output, spec.output) == argmaxes(ids)[15:]
    before, after = split_at_ready(done.output)
    stub = [ln for ln in after if ln.startswith("stub:")]
    # timed: one batched prefill of exactly the prompt, then the steps at positions 16..21
    assert stub == [f"stub: prefill_batched n=16 first={ids[0]} last={ids[15]}"] + \
        [f"stub: forward_token pos={p} sample=1" for p in range(16, 22)]
    # before READY: sequence 0 allocated once, a prefill of the same size and the same steps at
    # the same positions on throw-away ids (what the timed span runs, first-call costs paid)
    assert "stub: kv allocate seq=0 tokens=2048" in before
    warm = [ln for ln in before if ln.startswith(("stub: prefill_batched", "stub: forward_token"))]
    assert warm[0].startswith("stub: prefill_batched n=16 ") and warm[0] != stub[0]
    assert warm[1:] == stub[1:]
    assert any(ln.startswith("witness-timing: mode=prefill path=batched prompt=16 steps=6")
               for ln in after)


def test_a_long_prompt_may_warm_up_on_a_shorter_one(tool: Path, tmp_path: Path) -> None:
    """--warm-prompt=W: the warm-up prefill is W ids (then the N steps after them); the timed
    prompt is still P ids in one batch."""
    spec = spec_of("prefill", 24, 3)
    ids = ids_from(9, 27)
    done = run_tool(tool, tmp_path, ["prefill", str(model(tmp_path)), "24", "3", "--warm-prompt=10"],
                    witness.handoff_of(spec, ids))
    assert done.ok and witness_output.read_output_ids(done.output, spec.output) == argmaxes(ids)[23:]
    before, after = split_at_ready(done.output)
    assert [ln.split(" first=")[0] for ln in before if "stub: prefill_batched" in ln] == \
        ["stub: prefill_batched n=10"]
    assert [ln for ln in before if ln.startswith("stub: forward_token")] == \
        [f"stub: forward_token pos={p} sample=1" for p in range(10, 13)]
    assert f"stub: prefill_batched n=24 first={ids[0]} last={ids[23]}" in after


def test_the_kv_cache_is_the_benchmark_processes(tool: Path, tmp_path: Path) -> None:
    """bench's init_session: max_seq from the run's largest context and its 128 decode tokens,
    int8 KV from SPARKINFER_KV_INT8, else for a largest context >= 4096 (detail 2)."""
    spec = spec_of("prefill", 8, 2)
    ids = list(range(10))
    m = str(model(tmp_path))
    unpinned: dict[str, str | None] = {"SPARKINFER_KV_INT8": None}
    done = run_tool(tool, tmp_path, ["prefill", m, "8", "2", "--ctxs=128,4096,32768,65536"],
                    witness.handoff_of(spec, ids), env=unpinned)
    assert done.ok
    assert "stub: model max_seq=65680 vocab=5000" in done.output  # 65536 + 128 + 16
    assert "stub: kv int8=1 block=16 " in done.output
    # a run whose contexts stay under 4096 is bf16 KV in the bench: no batched prefill there
    # (sparkinfer's needs int8 KV), so neither here: the token fill, as bench_decode falls back
    done = run_tool(tool, tmp_path, ["prefill", m, "8", "2", "--ctxs=128,512"],
                    witness.handoff_of(spec, ids), env=unpinned)
    assert done.ok and "stub: kv int8=0 " in done.output and "path=token-fill" in done.output
    assert witness_output.read_output_ids(done.output, spec.output) == argmaxes(ids)[7:]
    done = run_tool(tool, tmp_path, ["prefill", m, "8", "2", "--ctxs=128,512"],
                    witness.handoff_of(spec, ids))
    assert done.ok and "stub: kv int8=1 " in done.output and "path=batched" in done.output


def test_the_moe_model_fills_its_prompt_token_by_token(tool: Path, tmp_path: Path) -> None:
    """prefill_batched returns -1 for the qwen35moe model: the prompt goes through forward_token
    (no LM head inside it), as bench_decode times that model's prefill cells."""
    spec = spec_of("prefill", 12, 3)
    ids = ids_from(3, 15)
    done = run_tool(tool, tmp_path, ["prefill", str(model(tmp_path, dense=False)), "12", "3"],
                    witness.handoff_of(spec, ids))
    assert done.ok, done.output
    assert witness_output.read_output_ids(done.output, spec.output) == argmaxes(ids)[11:]
    _, after = split_at_ready(done.output)
    stub = [ln for ln in after if ln.startswith("stub:")]
    assert stub == ([f"stub: forward_token pos={p} sample=0" for p in range(11)]
                    + [f"stub: forward_token pos={p} sample=1" for p in range(11, 15)])
    assert "path=token-fill" in done.output


def test_decode_at_depth_fills_before_ready_with_its_own_ids(tool: Path, tmp_path: Path) -> None:
    """The fill of 0..D-1 and bench_decode's 8 warm-up steps happen before READY; the prompt's
    id runs at D+8 and each step after it. The fill's ids are the tool's own and the same in
    every process, so main's and the PR's STEP ids are comparable."""
    spec = spec_of("decode", 32, 5)
    fresh = ids_from(11, 6)
    m = str(model(tmp_path))
    runs = [run_tool(tool, tmp_path, ["decode", m, "32", "5"], witness.handoff_of(spec, fresh))
            for _ in range(2)]
    expected = argmaxes(fill_ids(32) + fresh)[40:]
    for done in runs:
        assert done.ok, done.output
        assert witness_output.read_output_ids(done.output, spec.output) == expected
    before, after = split_at_ready(runs[0].output)
    assert [ln for ln in before if ln.startswith("stub: prefill_batched")] == \
        [f"stub: prefill_batched n=32 first={fill_ids(32)[0]} last={fill_ids(32)[31]}"]
    assert [ln for ln in before if ln.startswith("stub: forward_token")] == \
        [f"stub: forward_token pos={p} sample=1" for p in range(32, 40)]
    assert [ln for ln in after if ln.startswith("stub:")] == \
        [f"stub: forward_token pos={p} sample=1" for p in range(40, 46)]
    # another seed is another fill (a per-pair seed the harness could draw)
    other = run_tool(tool, tmp_path, ["decode", m, "32", "5", "--fill-seed=5"],
                     witness.handoff_of(spec, fresh))
    assert witness_output.read_output_ids(other.output, spec.output) == argmaxes(fill_ids(32, 5) + fresh)[40:]


def test_the_continuation_proves_the_fill(tool: Path, tmp_path: Path) -> None:
    """A head whose batched prefill skips part of the prompt is faster, and its argmax after
    the prompt may even be right; the continuation's ids, which depend on the state it left,
    disagree with main's, so its output is not verified."""
    spec = spec_of("prefill", 32, 8)
    ids = ids_from(5, 40)
    m = str(model(tmp_path))
    main = run_tool(tool, tmp_path, ["prefill", m, "32", "8"], witness.handoff_of(spec, ids))
    lazy = run_tool(tool, tmp_path, ["prefill", m, "32", "8"], witness.handoff_of(spec, ids),
                    env={"STUB_PREFILL_SKIP": "16"})
    got = {name: witness_output.read_output_ids(d.output, spec.output) for name, d in
           (("main", main), ("lazy", lazy))}
    assert got["main"] == argmaxes(ids)[31:] and got["lazy"] == argmaxes(ids, skip=16)[31:]
    assert witness_output.agreement(got["lazy"], got["main"], spec.output_tokens)[0] < spec.min_agreement


@pytest.mark.parametrize(("prompt", "steps", "error"), [
    ("1 2 3", ("4",), "[FAIL] prompt: 3 id(s) on the line, expected 4"),
    ("1 2 3 5000", ("4",), "[FAIL] prompt: '5000' is not an id in [0, 5000)"),
    ("1 2 3 x4", ("4",), "[FAIL] prompt: 'x4' is not an id"),
    ("1 2 3 4", ("4 5",), "[FAIL] step 1 of 2: 2 id(s) on the line, expected 1"),
    ("1 2 3 4", ("-4",), "[FAIL] step 1 of 2: '-4' is not an id"),
    ("1 2 3 4", ("4",), "[FAIL] step 2 of 2: EOF, expected a line of 1 id(s)"),  # stdin closed early
    ("1 2 3 4", ("4", "5", "6"), "[FAIL] input after the last of 2 steps"),
])
def test_malformed_input_fails_the_witness(tool: Path, tmp_path: Path, prompt: str,
                                           steps: tuple[str, ...], error: str) -> None:
    handoff = proc.Handoff(READY.encode(), f"{prompt}\n".encode(), b"EVALBOT_STEP ",
                           tuple(f"{s}\n".encode() for s in steps))
    done = run_tool(tool, tmp_path, ["prefill", str(model(tmp_path)), "4", "2"], handoff)
    assert done.returncode not in (0, None) and error in done.output, done.output


@pytest.mark.parametrize(("argv", "env", "rc", "error"), [
    (["prefill", "MODEL", "4"], {}, 64, "usage: evalbot-sparkinfer-witness"),
    (["generate", "MODEL", "4", "2"], {}, 64, "usage:"),  # no such mode (score: its own tests)
    (["prefill", "MODEL", "4", "2", "--ctxs=4096,x"], {}, 64, "usage:"),
    (["decode", "MODEL", "0", "2"], {}, 64, "[FAIL] decode: D and N between 1 and 1000000"),
    (["prefill", "MODEL", "4", "2", "--warm-prompt=5"], {}, 64, "W <= P"),
    (["decode", "MODEL", "16", "2", "--warm-prompt=4"], {}, 64, "usage:"),
    (["prefill", "MODEL", "4", "2"], {"STUB_CUDA_DEVICES": "0"}, 1, "[FAIL] no GPU"),
    (["prefill", "/nonexistent", "4", "2"], {}, 1, "[FAIL] open /nonexistent"),
])
def test_it_never_says_ready_without_the_work(tool: Path, tmp_path: Path, argv: list[str],
                                              env: dict[str, str | None], rc: int, error: str) -> None:
    argv = [str(model(tmp_path)) if a == "MODEL" else a for a in argv]
    done = run_tool(tool, tmp_path, argv, witness.handoff_of(spec_of("prefill", 4, 2), [1] * 6), env)
    assert done.returncode == rc and error in done.output and READY not in done.output


# ---- main's near ties: each STEP line's runner-up and margin ----------------------------------

def near_ties(ids: list[int]) -> list[tuple[int, int, float]]:
    """The stub's (argmax, runner-up, margin) after each position of `ids` (stub_runtime.cpp
    `top`, `second`, `gap`: the logits copy_logits writes)."""
    h, out = 0x5157454E3335, []
    for pos, i in enumerate(ids):
        h = _fmix(h ^ _fmix((i * 0x100000001B3 + pos) & M64))
        top = _fmix((h + 0x9E37) & M64) % VOCAB
        second = (top + 1 + _fmix((h + 0x51) & M64) % (VOCAB - 1)) % VOCAB
        out.append((top, second, (_fmix((h + 0x7A9) & M64) % 100) / 1000))
    return out


def test_each_step_line_carries_mains_runner_up_and_margin(tool: Path, tmp_path: Path) -> None:
    """The tool reads each step's logits back (copy_logits) and prints the runner-up id and the
    top-1 minus top-2 margin beside the argmax; the harness reads main's near ties from them."""
    spec = spec_of("prefill", 16, 40)
    ids = ids_from(21, 56)
    done = run_tool(tool, tmp_path, ["prefill", str(model(tmp_path)), "16", "40"],
                    witness.handoff_of(spec, ids))
    assert done.ok, done.output
    expected = near_ties(ids)[15:]
    steps = witness_output.read_steps(done.output)
    assert [(s.id, s.runner_up) for s in steps] == [(t, r) for t, r, _ in expected]
    assert [s.margin for s in steps] == pytest.approx([m for _, _, m in expected], abs=1e-6)
    ties = witness_output.main_ties(steps, spec.tie_margin)
    assert ties == [r if m < 0.05 else None for _, r, m in expected]
    assert 0 < sum(t is not None for t in ties) < len(ties)  # the stub has both kinds of steps


def test_a_head_with_other_numerics_agrees_through_mains_near_ties(tool: Path,
                                                                   tmp_path: Path) -> None:
    """A head whose argmax flips where its own logits are near-tied (STUB_FLIP_BELOW: bf16-like
    numerics) prints main's runner-up at some of main's near ties: credited in full, and the
    credit is counted. Flipping also where main's margin is wide is charged."""
    spec = spec_of("decode", 32, 60)
    fresh, m = ids_from(13, 61), str(model(tmp_path))
    main, bf16, wide = (run_tool(tool, tmp_path, ["decode", m, "32", "60"],
                                 witness.handoff_of(spec, fresh), env)
                        for env in ({}, {"STUB_FLIP_BELOW": "0.03"}, {"STUB_FLIP_BELOW": "0.09"}))
    assert main.ok and bf16.ok and wide.ok, (main.output, bf16.output, wide.output)
    ties = witness_output.main_ties(witness_output.read_steps(main.output), spec.tie_margin)
    got = {name: witness_output.read_output_ids(d.output, spec.output)
           for name, d in (("main", main), ("bf16", bf16), ("wide", wide))}
    flips = sum(a != b for a, b in zip(got["bf16"], got["main"], strict=True))
    assert flips > 0
    assert witness_output.agreement(got["bf16"], got["main"], 61, ties) == (1.0, flips)
    assert witness_output.agreement(got["bf16"], got["main"], 61, ())[0] == (61 - flips) / 61
    agree, credited = witness_output.agreement(got["wide"], got["main"], 61, ties)
    wide_flips = sum(a != b for a, b in zip(got["wide"], got["main"], strict=True))
    tied = sum(t is not None for t in ties)  # its flips at main's near ties are credited, no more
    assert flips <= credited == tied < wide_flips and agree == (61 - wide_flips + tied) / 61


def test_a_library_that_skips_the_logits_copy_fails_the_witness(tool: Path,
                                                                tmp_path: Path) -> None:
    """The copy is in the PR's library: a head that copies part of the logits (saving the
    copy's time in its witness) leaves the tool's NaN fill in place and fails, never faster."""
    spec = spec_of("prefill", 8, 3)
    done = run_tool(tool, tmp_path, ["prefill", str(model(tmp_path)), "8", "3"],
                    witness.handoff_of(spec, ids_from(2, 11)), {"STUB_LOGITS_COPIED": "100"})
    assert done.returncode == 3 and "[FAIL] the prompt: logit 100 not copied (NaN)" in done.output


# ---- a head that changed the API: unconfirmed, never an infra-error --------------------------

def test_an_engine_build_failure_stays_the_sides(toolkit: Path, tmp_path: Path) -> None:
    tree = stub_tree(tmp_path / "tree")
    (tree / "src" / "stub_moe.cpp").write_text("this does not compile\n")
    done = run_build(tree, toolkit)
    assert done.returncode not in (0, None) and "engine build failed" in done.output
    assert not (tree / TOOL).exists()


@pytest.fixture(scope="module")
def changed(tmp_path_factory: pytest.TempPathFactory, toolkit: Path) -> Path:
    """A head's tree whose qwen35.h renamed prefill_batched, built as the profile builds."""
    tree = stub_tree(tmp_path_factory.mktemp("changed") / "tree", api_change=True)
    done = run_build(tree, toolkit)
    assert done.ok, done.output  # the side's build succeeds: the tool is not the engine
    assert "witness tool: NOT built" in done.output and "prefill_batched" in done.output
    return tree


def test_a_head_whose_headers_no_longer_build_the_tool_gets_a_failing_placeholder(
        changed: Path, tmp_path: Path) -> None:
    artifact = changed / TOOL
    assert artifact.is_file() and artifact.read_text().startswith("#!/bin/sh\n")
    spec = spec_of("prefill", 4, 2)
    done = run_tool(artifact, tmp_path, ["prefill", "MODEL", "4", "2"], witness.handoff_of(spec, [1] * 6))
    assert done.returncode == 1 and done.handoff_s is None and READY not in done.output
    assert "[FAIL] evalbot-sparkinfer-witness was not built for this tree" in done.output
    assert "prefill_batched" in done.output  # the compiler's first error, named


def _repo(root: Path, toolkit: Path, heads: dict[str, dict[str, object]]) -> tuple[Path, str, dict[str, str]]:
    """A git repository of the stub tree (main: slow prefill) and one commit per head."""
    repo = stub_tree(root / "repo", speed=(4000, 1000))
    (repo / "build.sh").write_text((repo / "build.sh").read_text().replace(
        'echo "stub engine built"',
        'cp bench.py stub_speed.env build/runtime/\necho "stub engine built"'))
    (repo / "bench.py").write_text(BENCH)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "main")
    main = _git(repo, "rev-parse", "HEAD")
    shas = {}
    for name, change in heads.items():
        _git(repo, "checkout", "-q", "--detach", main)
        tmp = stub_tree(root / f"tree-{name}", **change)  # type: ignore[arg-type]
        for rel in ("runtime/include/sparkinfer/models/qwen35.h", "src/stub_runtime.cpp",
                    "stub_speed.env"):
            shutil.copyfile(tmp / rel, repo / rel)
        _git(repo, "commit", "-q", "-am", name)
        shas[name] = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "main")
    return repo, main, shas


# The stub's bench: the sweep's SWEEP_JSON line, its prefill taking the time its rate says (a
# rate true to the work: the samples' own wall times agree with it).
BENCH = r'''
import json, os, random, time
here = os.path.dirname(__file__)
env = dict(ln.split("=", 1) for ln in open(os.path.join(here, "stub_speed.env")).read().split())
us = int(env["PREFILL_US"])
out = {}
for ctx in [int(c) for c in os.environ["SPARKINFER_BENCH_SWEEP_CTXS"].split(",")]:
    noise = 1 + random.gauss(0, 0.002)
    time.sleep(ctx * us / 1e6 / noise)
    out[str(ctx)] = {"decode_tps": 1e6 / int(env["STEP_US"]), "prefill_pp": 1e6 / us * noise}
print("SWEEP_JSON " + json.dumps(out))
'''


def _job(repo: Path, base: str, head: str, model_path: Path, toolkit: Path) -> dict[str, object]:
    """The stub's job in the shape the proposed sparkinfer profile gives: the wrapper around the
    engine build, the tool among the artifacts, one prefill cell and its witness."""
    from evalbot.grading.sequential import critical_values

    looks = [3, 5]
    return {
        "schema": "evalbot.job/1", "job_id": "spk", "profile": "stub-sparkinfer", "repo": str(repo),
        "base_sha": base, "head_sha": head,
        "build_argv": ["{python}", "{harness}/engine/sparkinfer/build_witness.py", "--tree", "{tree}",
                       "--", "/bin/sh", "build.sh"],
        "build_timeout_s": 300.0,
        "artifacts": ["build/runtime/libsparkinfer_runtime.so", "build/moe/libsparkinfer_moe.so",
                      "build/runtime/bench.py", "build/runtime/stub_speed.env", TOOL],
        "models": [{"name": "m", "path": str(model_path), "sha256": "0" * 64, "role": "primary",
                    "namespace": "eval-m"}],
        "env": {"STUB_CUDA": str(toolkit), "SPARKINFER_KV_INT8": "1"},
        "runs": [{"model": "m", "argv": ["/usr/bin/env", "SPARKINFER_BENCH_SWEEP_CTXS={ctxs}", "{python}",
                                         "{build}/build/runtime/bench.py"],
                  "parse": {"kind": "json_line", "prefix": "SWEEP_JSON ",
                            "fields": {"prefill": "{ctx}.prefill_pp"}},
                  "cells": [{"model": "m", "metric": "prefill", "ctx": 64}], "timeout_s": 60.0,
                  "witnesses": [{"name": "prefill-64", "argv": [f"{{build}}/{TOOL}", "prefill", "{model}",
                                                                 "64", "4", "--ctxs={ctxs}"],
                                 "cells": {"m/prefill@64": 64}, "prompt_tokens": 64, "steps": 4,
                                 "output": {"kind": "step_lines"}, "output_tokens": 5, "pairs": 3,
                                 "min_agreement": 1.0, "clock": "handoff", "timeout_s": 60}]}],
        "rule": {"looks": looks, "critical": critical_values(looks, 1, 0.05), "sd_floor": 0.002,
                 "significance": 0.02, "tolerance": 0.02, "warmup": 1, "budget_s": 600.0,
                 "alpha": 0.05, "witness_share": 10.0},
        "correctness": None,
    }


@pytest.fixture(scope="module")
def evaluations(tmp_path_factory: pytest.TempPathFactory, toolkit: Path) -> dict[str, dict]:
    """main (prefill 250 tok/s) against an honest head 4x faster, and against the same head
    with its API changed, through the real harness (build, samples, witness) and grading."""
    root = tmp_path_factory.mktemp("jobs")
    heads = {"faster": {"speed": (1000, 1000)},
             "changed": {"speed": (1000, 1000), "api_change": True}}
    repo, main, shas = _repo(root, toolkit, heads)
    m = model(root)
    out = {}
    for name, sha in shas.items():
        # one box's cache for both jobs, as the bot's jobs share it: main is compiled once
        job = {**_job(repo, main, sha, m, toolkit), "cache_dir": str(root / "cache")}
        results = run_job(parse_job(job), root / f"job-{name}")
        out[name] = {"results": results, "verdict": grade(json.loads(json.dumps(results)), DEFAULT),
                     "jobdir": root / f"job-{name}"}
    return out


def test_an_honest_prefill_speedup_is_confirmed_by_the_tool(evaluations: dict[str, dict]) -> None:
    results, verdict = evaluations["faster"]["results"], evaluations["faster"]["verdict"]
    assert results["failures"] == [] and results["head"]["ok"]
    assert TOOL in results["head"]["artifacts"]  # hashed like the engine's own artifacts
    [w] = [w for w in results["witnesses"] if w["source"] == "witness"]
    assert all(s["verified"] and s["agreement"] == 1.0 for s in w["samples"])
    [cell] = verdict["cells"]
    assert cell["decision"] == "improved" and cell["confirmation"] == "confirmed"
    assert verdict["headline"] in TIERS


def test_a_head_that_changed_the_api_is_unconfirmed_not_an_infra_error(
        evaluations: dict[str, dict]) -> None:
    results, verdict = evaluations["changed"]["results"], evaluations["changed"]["verdict"]
    assert results["failures"] == [] and results["head"]["ok"]  # its build is the engine's
    assert TOOL in results["head"]["artifacts"]  # the placeholder, hashed and verified
    [w] = [w for w in results["witnesses"] if w["source"] == "witness"]
    heads = [s for s in w["samples"] if s["side"] == "head"]
    assert heads and all(not s["verified"] and s["error"] == "exit status 1" for s in heads)
    assert all(s["verified"] for s in w["samples"] if s["side"] == "base")
    logs = sorted((evaluations["changed"]["jobdir"] / "logs").glob("witness-*-head.log"))
    assert logs and "was not built for this tree" in logs[0].read_text()
    [cell] = verdict["cells"]
    assert cell["decision"] == "unconfirmed" and cell["tier"] is None
    assert verdict["tier"] is None and verdict["headline"] not in TIERS | {"eval:infra-error"}


def test_measurement_times_the_placeholder_as_a_failed_witness(tmp_path: Path, toolkit: Path) -> None:
    """One level down: the side built by build_side (checkout, the wrapper, the artifacts
    hashed), then `Measurement._timed` on the head's placeholder: a failed Timed, its error and
    the placeholder's message, never an exception."""
    repo, main, shas = _repo(tmp_path, toolkit, {"changed": {"api_change": True}})
    job = parse_job(_job(repo, main, shas["changed"], model(tmp_path), toolkit))
    built = build_side(job, "head", shas["changed"], tmp_path / "job")
    assert built.ok and TOOL in built.hashes
    m = Measurement(job, {"head": built, "base": built}, tmp_path / "job", ROOT)
    [spec] = job.runs[0].witnesses
    argv = [str(built.artifact_dir / TOOL), "prefill", str(model(tmp_path)), "64", "4"]
    timed = m._timed("head", argv, 60.0, list(range(68)), spec=spec)
    assert not timed.ok and timed.error == "exit status 1"
    assert "[FAIL] evalbot-sparkinfer-witness was not built for this tree" in timed.output


# ---- the real tool on the H200 (the smoke script before scripts/gpu_run.sh), as fixtures ------

H200 = ROOT / "tests" / "data" / "sparkinfer" / "witness-h200-qwythos-synth.txt"
TIMINGS = ROOT / "tests" / "data" / "sparkinfer" / "witness-h200-timings.jsonl"


def h200_sections() -> dict[str, tuple[dict[str, str], list[tuple[str, str]]]]:
    """`## name` sections: their `# key: value` lines and transcript ('<' printed, '>' written)."""
    found: dict[str, tuple[dict[str, str], list[tuple[str, str]]]] = {}
    name = ""
    for line in H200.read_text().splitlines():
        if line.startswith("## "):
            name = line[3:]
            found[name] = ({}, [])
        elif name and line.startswith("# ") and ": " in line:
            key, _, value = line[2:].partition(": ")
            found[name][0][key] = value
        elif name and line[:2] in ("< ", "> "):
            found[name][1].append((line[0], line[2:]))
    return found


def steps_of(lines: list[tuple[str, str]]) -> list[int]:
    return [int(t[len("EVALBOT_STEP "):]) for way, t in lines if way == "<" and t != READY]


def test_the_h200_transcripts_are_the_stepped_protocol() -> None:
    sections = h200_sections()
    assert len(sections) == 6
    for meta, lines in sections.values():
        mode, _, a, n = meta["argv"].split()[1:5]
        assert lines[0] == ("<", READY)
        assert "".join(way for way, _ in lines[1:]) == "><" * (int(n) + 1)
        prompt, *steps = [t for way, t in lines if way == ">"]
        assert len(prompt.split()) == (int(a) if mode == "prefill" else 1)
        assert all(len(s.split()) == 1 for s in steps)
        assert len(set(steps_of(lines))) > 1
        assert f"mode={mode} " in meta["witness-timing"]


def test_on_the_h200_the_tool_agrees_with_the_engines_own_tools() -> None:
    """The batched prefill's argmax is qwen3_gguf_prefill_check's for its prompt, and the
    continuation after it parts from the token path (the score tool's teacher forcing) about as
    often as prefill_check says the batched fill does; the token fill (qwen35moe) is the score's
    path exactly; the same ids give the same ids (one build's A/A); the int8 prefill projections
    turned off (the slow-prefill head's numerics) flip 10 of 65 on this random-weight model."""
    s = h200_sections()
    meta, lines = s["prefill-check"]
    out, score = steps_of(lines), [int(t) for t in meta["score_am"].split()]
    assert out[0] == 12929 and "seed(batched)=12929 TOP1 13/16" in meta["prefill_check"]
    assert out[0] != score[0]  # the batched fill's last-position argmax: not the token path's
    assert sum(a != b for a, b in zip(out[1:], score[1:], strict=False)) == 3  # of 15; prefill_check: 3 of 16
    meta, lines = s["decode-128"]
    score = [int(t) for t in meta["score_am"].split()]
    assert sum(a == b for a, b in zip(steps_of(lines), score, strict=False)) == 29 == len(score) - 3
    meta, lines = s["moe4-prefill-512"]
    score = [int(t) for t in meta["score_am"].split()]
    assert steps_of(lines)[:len(score)] == score and "path=token-fill" in meta["witness-timing"]
    one, two, off = (steps_of(s[k][1]) for k in ("aa-prefill-1", "aa-prefill-2", "aa-prefill-i8off"))
    assert one == two and len(one) == 65
    assert witness_output.agreement(off, one, 65)[0] == pytest.approx(55 / 65)


def test_on_the_h200_the_witness_times_what_the_bench_times() -> None:
    """The tool's own clock: its 4096-id batched prefill takes what the bench's prefill@4096 rate
    says (6414 tok/s: 0.639 s), each step 0.7-1.1% more than the bench's decode at that depth
    (it copies its argmax to the host; the bench's device loop does not). The harness's handoff
    clock over 94 prefill-4096 processes (4096 ids + 32 steps): 0.7355 s, sd 1.5 ms."""
    rows = [json.loads(ln) for ln in TIMINGS.read_text().splitlines()]
    sweep = rows[0]["bench_sweep"]
    by: dict[str, list[dict[str, object]]] = {}
    for r in rows[1:]:
        if r["model"] == "qwythos":
            by.setdefault(r["witness"], []).append(r)
    prompt = sorted(float(r["prompt_s"]) for r in by["prefill-4096"])
    assert prompt[len(prompt) // 2] == pytest.approx(4096 / sweep["4096"]["prefill_pp"], rel=0.01)
    for name, ctx in (("decode-128", "128"), ("decode-4096", "4096"), ("decode-32768", "32768"),
                      ("decode-65536", "65536")):
        step = sum(float(r["step_mean_ms"]) for r in by[name]) / len(by[name])
        assert 1.0 < step / (1000 / sweep[ctx]["decode_tps"]) < 1.02, name
    handoff = [float(r["handoff_s"]) for r in by["prefill-4096"]]
    assert len(handoff) == 94 and max(handoff) - min(handoff) < 0.01
