"""End-to-end tests of the demo engine repository generator (engine/demo).

Generates the repo, builds main and every PR in git worktrees, runs the built
engine's `bench` and `score` and the float64 reference.  No timing asserts:
speed effects are measured by the harness, not here.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
# pytest puts tests/ (not the project root) on sys.path when run as plain `pytest`.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from evalbot.engine.demo import DemoRepo, generate  # noqa: E402
from evalbot.engine.demo.repo import variant_names  # noqa: E402
from evalbot.engine.demo.weights import read_weights  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(
    [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, cwd=cwd, env=ENV, text=True, capture_output=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRepo:
    return generate(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def builds(demo: DemoRepo, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Variant name -> built engine script, each built in its own worktree."""
    root = tmp_path_factory.mktemp("worktrees")
    out: dict[str, Path] = {}
    for name, sha in {"main": demo.main_sha, **demo.prs}.items():
        tree = root / name
        _run(["git", "worktree", "add", "--detach", str(tree), sha], cwd=demo.path)
        _run([sys.executable, "build.py"], cwd=tree)
        info = json.loads((tree / "build" / "BUILD_INFO.json").read_text())
        assert len(info["source_sha256"]) == 64
        out[name] = tree / "build" / "demo_engine.py"
    return out


@pytest.fixture(scope="module")
def tokens_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = random.Random(7)
    path = tmp_path_factory.mktemp("tokens") / "windows.json"
    path.write_text(json.dumps([[rng.randrange(256) for _ in range(128)] for _ in range(8)]))
    return path


@pytest.fixture(scope="module")
def scores(demo: DemoRepo, builds: dict[str, Path], tokens_file: Path,
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Raw score JSON text of the reference and of main, neutral, faster, broken."""
    out_dir = tmp_path_factory.mktemp("scores")
    result: dict[str, str] = {}
    common = ["--model", str(demo.model_path), "--tokens", str(tokens_file), "--topk", "8"]
    ref_out = out_dir / "reference.json"
    _run([sys.executable, "-m", "engine.demo.reference", "score", *common, "--out", str(ref_out)],
         cwd=ROOT)
    result["reference"] = ref_out.read_text()
    for name in ("main", "neutral", "faster", "broken"):
        out = out_dir / f"{name}.json"
        _run([sys.executable, str(builds[name]), "score", *common,
              "--out", str(out)], cwd=out_dir)
        result[name] = out.read_text()
    return result


def _bench(demo: DemoRepo, script: Path) -> dict[str, Any]:
    proc = _run([sys.executable, str(script), "bench", "--model", str(demo.model_path),
                 "--ctxs", "0,64,300", "--decode-tokens", "16"],
                cwd=script.parent)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH_JSON ")]
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0].removeprefix("BENCH_JSON "))


def _top1_agreement(a: str, b: str) -> float:
    wa, wb = json.loads(a)["windows"], json.loads(b)["windows"]
    assert len(wa) == len(wb)
    pairs = [(x, y) for u, v in zip(wa, wb, strict=True)
             for x, y in zip(u["argmax"], v["argmax"], strict=True)]
    return sum(x == y for x, y in pairs) / len(pairs)


def test_repo_layout(demo: DemoRepo) -> None:
    assert sorted(demo.prs) == sorted(variant_names())
    assert variant_names() == ["faster", "neutral", "slow_long", "broken"]
    for sha in (demo.main_sha, *demo.prs.values()):
        assert len(sha) == 40 and all(c in "0123456789abcdef" for c in sha)
    assert demo.model_path.is_file() and demo.model_path.parent.name == "models"
    assert demo.path.name == "engine-repo"
    assert not demo.model_path.is_relative_to(demo.path)
    branches = subprocess.run(["git", "branch", "--format=%(refname:short)"], cwd=demo.path,
                              text=True, capture_output=True, check=True).stdout.split()
    assert sorted(branches) == sorted(["main", *(f"pr/{n}" for n in variant_names())])


def test_generation_is_deterministic(demo: DemoRepo, tmp_path: Path) -> None:
    again = generate(tmp_path / "again")
    assert again.model_sha256 == demo.model_sha256
    assert again.model_path.read_bytes() == demo.model_path.read_bytes()
    assert again.main_sha == demo.main_sha and again.prs == demo.prs
    cfg, tensors = read_weights(again.model_path)
    assert cfg["vocab_size"] == 256 and cfg["d_model"] == 128
    assert tensors["tok_emb"].shape == (256, 128)


def test_package_imports_nothing_beyond_numpy() -> None:
    code = ("import sys, engine.demo, engine.demo.repo, engine.demo.reference; "
            "heavy = {'torch', 'scipy'} & set(sys.modules); assert not heavy, heavy")
    _run([sys.executable, "-c", code], cwd=ROOT)


def test_build_rejects_syntax_error(demo: DemoRepo, tmp_path: Path) -> None:
    tree = tmp_path / "bad"
    _run(["git", "worktree", "add", "--detach", str(tree), demo.main_sha], cwd=demo.path)
    (tree / "demo_engine.py").write_text("def broken(:\n")
    proc = subprocess.run([sys.executable, "build.py"], cwd=tree, text=True,
                          capture_output=True, check=False)
    assert proc.returncode != 0 and "does not compile" in proc.stderr


def test_bench_output(demo: DemoRepo, builds: dict[str, Path]) -> None:
    main = _bench(demo, builds["main"])
    faster = _bench(demo, builds["faster"])
    for result in (main, faster):
        assert list(result) == ["0", "64", "300"]
        for ctx, entry in result.items():
            assert set(entry) == {"decode_tps", "prefill_tps", "decode_argmax"}
            assert entry["decode_tps"] > 0
            assert (entry["prefill_tps"] > 0) == (ctx != "0")
            assert len(entry["decode_argmax"]) == 16
    for ctx in main:
        assert faster[ctx]["decode_argmax"] == main[ctx]["decode_argmax"]


def test_score_format(scores: dict[str, str]) -> None:
    windows = json.loads(scores["main"])["windows"]
    assert len(windows) == 8
    for win in windows:
        assert len(win["top"]) == len(win["target_lp"]) == len(win["argmax"]) == 127
        first = win["top"][0]
        assert len(first) == 8 and first[0][0] == win["argmax"][0]
        assert all(lp <= 0.0 for _, lp in first)
        assert [lp for _, lp in first] == sorted((lp for _, lp in first), reverse=True)


def test_main_matches_reference(scores: dict[str, str]) -> None:
    assert _top1_agreement(scores["main"], scores["reference"]) > 0.95


def test_faster_matches_reference(scores: dict[str, str]) -> None:
    assert _top1_agreement(scores["faster"], scores["reference"]) > 0.95


def test_broken_disagrees_with_reference(scores: dict[str, str]) -> None:
    assert _top1_agreement(scores["broken"], scores["reference"]) < 0.9


def test_neutral_is_bit_identical(scores: dict[str, str]) -> None:
    assert scores["neutral"] == scores["main"]
