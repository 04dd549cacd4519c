"""The llama.cpp adapter: score-line parsing, the score command, the reference build's pins."""

from __future__ import annotations

import io
import json
import os
import stat
import sys
import tarfile
import time
from pathlib import Path

import pytest

from evalbot.engine.llamacpp.build import cmake_flags, mirror
from evalbot.engine.llamacpp.manifest import ManifestError, verified_tool, write_manifest
from evalbot.engine.llamacpp.reference_build import SourceError, from_tarball, llama_root
from evalbot.engine.measure.parsing import ParseError, read_score_lines

DATA = Path(__file__).parent / "data" / "llamacpp"
SCORE_PY = Path(__file__).parents[1] / "engine" / "llamacpp" / "score.py"

# Written from the documented format of sparkinfer's qwen3_gguf_score
# (shared/reference/sparkinfer-formats.md), not captured from the tool: we have no output of it.
SPARK_SCORE = """loading model ...
S i=0 tgt=11 am=11 lp=-0.150000 top=11:-0.150000,7:-2.500000,3:-4.000000
S i=1 tgt=5 am=9 lp=-3.200000 top=9:-0.300000,5:-3.200000,1:-3.900000
PPL 5.05 over 2 positions
ARGMATCH 1/2 0.5000
"""


def test_documented_sparkinfer_score_lines_parse() -> None:
    [window] = read_score_lines(SPARK_SCORE, topk=3)
    assert window["argmax"] == [11, 9]
    assert window["top"][1] == [[9, -0.3], [5, -3.2], [1, -3.9]]


def test_real_topk_tool_output_parses() -> None:
    """Captured from evalbot-topk (CPU build of the pinned tree, tiny synthetic model)."""
    out = (DATA / "topk-cpu-tiny.txt").read_text()
    windows = read_score_lines(out, topk=8)
    asked = json.loads((DATA / "topk-cpu-tiny.tokens.json").read_text())
    assert [len(w["top"]) for w in windows] == [len(w) - 1 for w in asked]
    for w in windows:
        for top, am in zip(w["top"], w["argmax"], strict=True):
            assert top[0][0] == am and all(a[1] >= b[1] for a, b in zip(top, top[1:], strict=False))


@pytest.mark.parametrize(("output", "message"), [
    ("", "no S lines"),
    ("W 3\nS i=0 tgt=1 am=1 lp=-1 top=1:-1,2:-2\n", "truncated"),
    ("W 3\nS i=0 tgt=1 am=1 lp=-1 top=1:-1,2:-2\nEND\n", "expected 2"),
    ("S i=1 tgt=1 am=1 lp=-1 top=1:-1,2:-2\n", "out of order"),
    ("S i=0 tgt=1 am=1 lp=-1 top=1:-1\n", "top entries"),
    ("S i=0 tgt=1 am=1 lp=-1 top=1:0.5,2:-2\n", "above 0"),
    ("S i=0 tgt=1 am=1 lp=-1 top=1:x,2:-2\n", "not id:logprob pairs"),
    ("S i=0 garbage\n", "documented format"),
])
def test_broken_score_output_is_an_error(output: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        read_score_lines(output, topk=2)


def _tool(tmp_path: Path, stdout: Path, rc: int = 0) -> Path:
    """An executable standing in for the compiled tool: it prints recorded real output."""
    tool = tmp_path / "tool"
    tool.write_text(f"#!/bin/sh\ncat {stdout}\nexit {rc}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return tool


def _score(args: list[str]) -> int:
    import subprocess

    return subprocess.run([sys.executable, str(SCORE_PY), *args], check=False).returncode


def test_score_command_writes_the_contract(tmp_path: Path) -> None:
    tool = _tool(tmp_path, DATA / "topk-cpu-tiny.txt")
    out = tmp_path / "out.json"
    rc = _score(["--bin", str(tool), "--model", "m.gguf", "--tokens",
                 str(DATA / "topk-cpu-tiny.tokens.json"), "--topk", "8", "--out", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["windows"] == read_score_lines((DATA / "topk-cpu-tiny.txt").read_text(), 8)


def test_score_command_fails_when_the_tool_fails_or_scores_fewer_windows(tmp_path: Path) -> None:
    tokens = tmp_path / "t.json"
    asked = json.loads((DATA / "topk-cpu-tiny.tokens.json").read_text())
    tokens.write_text(json.dumps(asked + [asked[0]]))  # one window more than the output holds
    args = ["--model", "m", "--tokens", str(tokens), "--topk", "8", "--out", str(tmp_path / "o")]
    assert _score(["--bin", str(_tool(tmp_path, DATA / "topk-cpu-tiny.txt")), *args]) == 1
    assert _score(["--bin", str(_tool(tmp_path, DATA / "topk-cpu-tiny.txt", rc=3)), *args]) == 1
    assert not (tmp_path / "o").exists()


def test_reference_is_refused_until_built_and_when_tampered(tmp_path: Path) -> None:
    ref = tmp_path / "llamacpp-reference" / "k"
    with pytest.raises(ManifestError, match="no llama.cpp reference build"):
        verified_tool(ref)
    ref.mkdir(parents=True)
    (ref / "evalbot-topk").write_bytes(b"tool")
    (ref / "llama-bench").write_bytes(b"bench")
    write_manifest(ref, {"kind": "tarball", "sha256": "0" * 64}, [])
    assert verified_tool(ref) == ref / "evalbot-topk"
    (ref / "llama-bench").write_bytes(b"changed")
    with pytest.raises(ManifestError, match="llama-bench does not match"):
        verified_tool(ref)


def _tarball(tmp_path: Path) -> Path:
    path = tmp_path / "src.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        data = b"// llama.h\n"
        info = tarfile.TarInfo("llama.cpp/include/llama.h")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_reference_source_is_verified_before_unpacking(tmp_path: Path) -> None:
    import hashlib

    tar = _tarball(tmp_path)
    with pytest.raises(SourceError, match="does not match the pin"):
        from_tarball(tar, "f" * 64, tmp_path / "a")
    assert not (tmp_path / "a").exists()
    pin = hashlib.sha256(tar.read_bytes()).hexdigest()
    assert from_tarball(tar, pin, tmp_path / "b") == {"kind": "tarball", "sha256": pin}
    assert llama_root(tmp_path / "b") == tmp_path / "b" / "llama.cpp"


def test_mirror_copies_only_changed_files(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    (src / "a").mkdir(parents=True)
    (src / "a" / "same.c").write_text("same")
    (src / "a" / "edit.cu").write_text("v1")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref")
    assert mirror(src, dest) == 2
    old = time.time() - 1000
    os.utime(dest / "a" / "same.c", (old, old))
    (src / "a" / "edit.cu").write_text("v2")
    (dest / "stale.o").write_text("x")
    assert mirror(src, dest) == 1
    assert (dest / "a" / "edit.cu").read_text() == "v2"
    assert (dest / "a" / "same.c").stat().st_mtime == pytest.approx(old)  # ninja skips it
    assert not (dest / "stale.o").exists() and not (dest / ".git").exists()


def test_cmake_flags_take_only_defines() -> None:
    assert "-DGGML_CUDA_FA=OFF" in cmake_flags("cuda", "90", ["-DGGML_CUDA_FA=OFF"])
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in cmake_flags("cuda", "90")
    with pytest.raises(SystemExit):
        cmake_flags("cpu", "90", ["--trace; rm -rf /"])


def test_llama_bench_json_survives_merged_stderr_logs() -> None:
    """The harness merges stderr into stdout: log lines around and inside the array are dropped."""
    from evalbot.engine.contract.job import Cell
    from evalbot.engine.measure.parsing import read_rates

    fixture = (Path(__file__).parent / "data" / "fixtures" /
               "llama-bench-h200-qwen3-1p7b-synthetic.json").read_text()
    lines = fixture.splitlines()
    lines.insert(1 + next(i for i, ln in enumerate(lines[1:]) if ln.strip() == "},"),
                 "llama_context: n_ctx = 4608 [warmup]")
    noisy = ("ggml_cuda_init: found 1 CUDA devices: [0]\n  Device 0: NVIDIA H200\n"
             + "\n".join(lines) + "\nmain: done [ok]\n")
    cells = [Cell("l", "prefill", 4096), Cell("l", "decode", 16384)]
    assert read_rates(noisy, {"kind": "llama_bench"}, cells) == {
        "l/prefill@4096": 23402.885095, "l/decode@16384": 417.026105}
    with pytest.raises(ParseError, match="no llama-bench JSON"):
        read_rates("ggml_cuda_init: [0]\n", {"kind": "llama_bench"}, cells)


DEEP = """W 5 2
S i=2 tgt=4 am=4 lp=-0.2 top=4:-0.2,8:-2.0
S i=3 tgt=5 am=5 lp=-0.3 top=5:-0.3,1:-2.5
END
"""


def test_a_window_scored_from_a_position_on_reads_its_deep_rows_only() -> None:
    [window] = read_score_lines(DEEP, topk=2)
    assert window["argmax"] == [4, 5] and len(window["top"]) == 2
    with pytest.raises(ParseError, match="expected i=2, got i=0"):
        read_score_lines(DEEP.replace("i=2", "i=0"), topk=2)
    with pytest.raises(ParseError, match="2 positions, expected 3"):  # W 6 2: positions 2..4
        read_score_lines(DEEP.replace("W 5 2", "W 6 2"), topk=2)


def test_score_command_passes_the_first_scored_position_and_checks_the_rows(
        tmp_path: Path) -> None:
    printed = tmp_path / "deep.txt"
    printed.write_text(DEEP)
    tool = tmp_path / "tool"
    # The stand-in prints the recorded rows and keeps the window lines it was handed.
    tool.write_text(f"#!/bin/sh\ncp \"$4\" {tmp_path}/asked.txt\ncat {printed}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    tokens, out = tmp_path / "t.json", tmp_path / "o.json"
    tokens.write_text(json.dumps({"windows": [[1, 2, 3, 4, 5]], "score_from": [2]}))
    args = ["--bin", str(tool), "--model", "m", "--tokens", str(tokens), "--topk", "2",
            "--out", str(out)]
    assert _score(args) == 0
    assert (tmp_path / "asked.txt").read_text() == "@2 1 2 3 4 5\n"
    assert len(json.loads(out.read_text())["windows"][0]["top"]) == 2
    tokens.write_text(json.dumps({"windows": [[1, 2, 3, 4, 5]], "score_from": [1]}))
    assert _score(args) == 1  # 2 rows printed, 3 asked: refused
    tokens.write_text(json.dumps({"windows": [[1, 2, 3]], "score_from": [2]}))
    assert _score(args) == 1  # nothing left to score


def test_the_shipped_build_command_runs_as_the_harness_runs_it(tmp_path: Path) -> None:
    """The build runs in the PR's tree with an isolated Python (-I: no PYTHONPATH, no cwd on
    sys.path): `-m engine.llamacpp.build` found no `engine` there on the GPU box (every
    evaluation an infra-error at the build), so the profile names the harness's script."""
    from evalbot.engine.sandbox import proc
    from evalbot.engine.sides.build import HARNESS_ROOT
    from evalbot.evaluation.profile import load_profile

    # the box's interpreter need not have evalbot installed (the harness is a copied tree):
    # the venv's base interpreter has no `engine` package, as on the GPU box
    bare = getattr(sys, "_base_executable", sys.executable)
    argv = list(load_profile("llamacpp").build_argv)
    script = argv.index("--tree")
    filled = [a.format(python=bare, tree=str(tmp_path), harness=str(HARNESS_ROOT))
              for a in argv[:script]] + ["--help"]
    done = proc.run(filled, cwd=tmp_path, timeout_s=120, log=tmp_path / "build.log",
                    env={"PYTHONPATH": ""}, trusted=True)
    assert done.ok, done.output
    assert "--shared-build" in done.output
