"""The correctness guard on the real demo engine: built artifacts, real score runs, real reference.

Score only (no speed pairs): engine.scoring.correctness.score is called with the job the bot would send,
and the greedy tokens of one real timed decode per side (the engine's `bench`), then the bot's
decision is taken on the recorded section, as grading does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.settings import REPO_ROOT, BoxConfig
from evalbot.engine.contract.job import Job
from evalbot.engine.contract.results import validate
from evalbot.engine.demo import DemoRepo, generate
from evalbot.engine.measure.gpu import device_identity
from evalbot.engine.measure.parsing import read_argmax
from evalbot.engine.scoring.correctness import score
from evalbot.engine.sides.build import HARNESS_ROOT, Built, build_side
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import load_profile
from evalbot.grading.correctness_policy import decide
from evalbot.grading.policy import load_labels

BENCH_CTX = 64
# A head whose timed decode reports tokens its own score run would never predict: the greedy
# token is shifted by one, so the decode path and the scored path disagree.
DECODE_LIES = ("        argmax.append(int(np.argmax(logits[-1])))",
               "        argmax.append((int(np.argmax(logits[-1])) + 1) % 256)")


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t.invalid", "HOME": str(repo), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, text=True,
                          capture_output=True).stdout.strip()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoRepo, str]:
    """The demo repository plus one extra commit whose decode lies about its greedy tokens."""
    repo = generate(tmp_path_factory.mktemp("demo"))
    _git(repo.path, "checkout", "-q", "--detach", repo.main_sha)
    source = repo.path / "demo_engine.py"
    text = source.read_text()
    assert text.count(DECODE_LIES[0]) == 1
    source.write_text(text.replace(*DECODE_LIES))
    _git(repo.path, "commit", "-q", "-am", "decode: report shifted tokens")
    return repo, _git(repo.path, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def box(demo: tuple[DemoRepo, str], tmp_path_factory: pytest.TempPathFactory) -> BoxConfig:
    repo, _ = demo
    return BoxConfig(name="local", kind="local", workdir=str(tmp_path_factory.mktemp("box")),
                     repo=str(repo.path), models_dir=str(repo.model_path.parent), trusted=True,
                     python=sys.executable)


def _job(box: BoxConfig, base: str, head: str, seed: int = 7) -> Job:
    policy = load_labels(REPO_ROOT / "labels.yaml").policy("default")
    return make_job(load_profile("demo"), policy, box, base, head, seed=seed)


def _build(job: Job, jobdir: Path) -> dict[str, Built]:
    built = {side: build_side(job, side, sha, jobdir)
             for side, sha in (("base", job.base_sha), ("head", job.head_sha))}
    assert all(b.ok for b in built.values()), [b.failure for b in built.values()]
    return built


def _greedy(job: Job, built: dict[str, Built], jobdir: Path) -> list[dict[str, Any]]:
    """One real timed decode per side on the speed tokens, read the way the harness reads it."""
    from evalbot.engine.scoring.tokens import speed_tokens

    tokens = speed_tokens(jobdir)
    run = job.runs[0]
    cell = next(c for c in run.cells if c.metric == "decode" and c.ctx == BENCH_CTX)
    greedy = {}
    for side, b in built.items():
        argv = [a.format(python=sys.executable, harness=str(HARNESS_ROOT),
                         build=str(b.artifact_dir), model=job.models[0].path,
                         ctxs=str(BENCH_CTX), tokens=str(tokens)) for a in run.argv]
        out = subprocess.run(argv, cwd=b.artifact_dir, env=dict(job.env, PATH="/usr/bin:/bin"),
                             capture_output=True, text=True, timeout=120, check=True).stdout
        greedy[side] = read_argmax(out, run.parse, [cell])[cell.key]
    return [{"model": cell.model, "metric": "decode", "ctx": cell.ctx, "decode_argmax": greedy}]


def _section(box: BoxConfig, base: str, head: str, jobdir: Path,
             with_decode: bool = False) -> dict[str, Any]:
    job = _job(box, base, head)
    built = _build(job, jobdir)
    cells = _greedy(job, built, jobdir) if with_decode else []
    section = score(job, built, jobdir, REPO_ROOT, cells, device=device_identity())
    doc = {"schema": "evalbot.results/1", "job_id": "t", "profile": "demo", "box": {},
           "base": {"sha": base, "ok": True}, "head": {"sha": head, "ok": True},
           "rule": {"looks": [2], "critical": [1.0], "sd_floor": 0.1, "significance": 0.1,
                    "tolerance": 0.1}, "cells": [], "failures": [],
           "correctness": json.loads(json.dumps(section))}
    validate(doc)  # what the harness writes passes the results contract
    return doc["correctness"]


def _policy() -> Any:
    return load_labels(REPO_ROOT / "labels.yaml").policy("default").correctness


def test_broken_pr_is_rejected(demo: tuple[DemoRepo, str], box: BoxConfig,
                               tmp_path: Path) -> None:
    repo, _ = demo
    section = _section(box, repo.main_sha, repo.prs["broken"], tmp_path)
    verdict = decide(section, _policy())
    assert verdict["decision"] == "reject"
    assert verdict["diff_top1"]["hi"] < -0.1  # far beyond the margin, not a borderline call
    assert any("top-1 agreement fell" in r for r in verdict["reasons"])
    assert section["stopped"] == "decided" and len(section["looks"]) == 1


def test_faster_pr_passes_and_its_decode_matches_its_score(demo: tuple[DemoRepo, str],
                                                           box: BoxConfig, tmp_path: Path) -> None:
    repo, _ = demo
    section = _section(box, repo.main_sha, repo.prs["faster"], tmp_path, with_decode=True)
    assert {w["kind"] for w in section["windows"]} == {"short", "long"}
    longs = [c for c in section["chunks"] if c["kind"] == "long"]  # every position of both
    assert sum(c["positions"] for c in longs) == 2 * 1023  # long-context windows, in pieces
    verdict = decide(section, _policy())
    assert verdict["decision"] in ("pass", "inert")
    assert section["consistency"]["checked"]
    assert not verdict["consistency"]["head_mismatch"]
    assert all(r["compared"] > 20 and r["mismatches"] == 0 for r in verdict["consistency"]["cells"])


def test_decode_that_disagrees_with_its_score_is_rejected(demo: tuple[DemoRepo, str],
                                                          box: BoxConfig, tmp_path: Path) -> None:
    repo, liar = demo
    section = _section(box, repo.main_sha, liar, tmp_path, with_decode=True)
    assert section["identical"]  # the score path is main's: only the timed decode differs
    verdict = decide(section, _policy())
    assert verdict["decision"] == "reject"
    assert verdict["consistency"]["head_mismatch"] and not verdict["consistency"]["base_mismatch"]
    assert any("speed/score mismatch" in r for r in verdict["reasons"])


def test_seed_picks_the_windows_and_is_recorded(box: BoxConfig) -> None:
    from evalbot.engine.scoring.correctness import plan
    from evalbot.engine.scoring.tokens import corpus_bytes

    text, _ = corpus_bytes()
    spec = _job(box, "a" * 40, "b" * 40, seed=11).correctness
    assert spec is not None
    again = plan(spec, text)
    assert again == plan(spec, text)
    other = plan(replace(spec, seed=12), text)
    assert [w.index for w in again] != [w.index for w in other]
    assert len(again) == spec.looks[-1] and again[0].kind == "long"
