"""`evalbot warm-reference` and the harness's `python -m engine warm-reference`: the reference of
the profile's whole correctness grid is scored once per box, and an evaluation there runs no
reference process at all.

The demo profile cut to its short windows (tests/demo_profile.py: the 818 windows of 128 bytes;
its 1,227 long windows of 1024 would take the float64 reference some 20 minutes here) on a local
box, driven through the real command, the real harness and the real pipeline. Where a test needs
a reference that fails or hangs on cue, a stub reference stands in for the demo's (the windows,
the cache and the harness around it are real)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from evalbot.cli import cli
from evalbot.config.settings import REPO_ROOT, load_config
from evalbot.engine.demo import DemoRepo, generate
from evalbot.engine.harness.warm_reference import batches, whole_grid
from evalbot.engine.scoring.correctness import plan
from evalbot.engine.scoring.long_corpus import long_text
from evalbot.engine.scoring.tokens import Stream, corpus_bytes
from evalbot.evaluation import pipeline
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import load_profile
from evalbot.grading.policy import load_labels
from evalbot.service.pool import open_box
from evalbot.service.warm_reference import warm_job
from tests.demo_profile import NO_WITNESS, cut_demo_profile, one_look_demo_profile
from tests.sshd import SANDBOX_USER, Sshd

POLICY = load_labels(REPO_ROOT / "labels.yaml").policy("default")
GRID = 818  # short windows of 128 bytes in the demo corpus
# its commands' own deadlines (900 s, then 600 s) are longer than pyproject.toml's per-test
# timeout: they, with their messages, come first
pytestmark = pytest.mark.timeout(1560)
# A reference that predicts every next id with certainty, logs each call's window count, and
# does what CONTROL says on its n-th call: fail, or hang (after saying so, with its pid, on a
# FIFO the test reads).
STUB = r'''import json, os, signal, sys
tokens, out, topk, log, control = sys.argv[1:6]
doc = json.load(open(tokens))
windows, froms = (doc["windows"], doc["score_from"]) if isinstance(doc, dict) else \
    (doc, [0] * len(doc))
with open(log, "a") as f:
    f.write(json.dumps({"windows": len(windows)}) + "\n")
calls = len(open(log).read().splitlines())
how = json.load(open(control)) if os.path.exists(control) else {}
if how.get("fail_at") == calls:
    print("reference: out of device memory", file=sys.stderr)
    sys.exit(7)
if how.get("hang_at") == calls:
    with open(how["fifo"], "w") as f:
        f.write(f"hung {os.getpid()}")
    while True:  # hung until a signal kills it
        signal.pause()
rows = [{"top": [[[(w[i + 1] + j) % 256, -0.1 - 4 * j] for j in range(int(topk))]
                 for i in range(f, len(w) - 1)],
         "argmax": [w[i + 1] for i in range(f, len(w) - 1)]} for w, f in zip(windows, froms)]
json.dump({"windows": rows}, open(out, "w"))
'''


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRepo:
    return generate(tmp_path_factory.mktemp("demo"))


def _profile(tmp: Path, reference_argv: list[str] | None = None) -> Path:
    path = cut_demo_profile(tmp / "profile")
    if reference_argv is not None:
        doc = yaml.safe_load(path.read_text())
        doc["correctness"]["reference_argv"] = reference_argv
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _stub_profile(tmp: Path) -> Path:
    (tmp / "stub.py").write_text(STUB)
    return _profile(tmp, ["{python}", str(tmp / "stub.py"), "{tokens}", "{out}", "{topk}",
                          str(tmp / "calls.jsonl"), str(tmp / "control.json")])


def _config(tmp: Path, demo: DemoRepo, profile: Path, models_dir: Path | None = None) -> Path:
    config = tmp / "evalbot.yaml"
    box = {"name": "local", "kind": "local", "workdir": str(tmp / "box"), "repo": str(demo.path),
           "models_dir": str(models_dir or demo.model_path.parent), "python": sys.executable,
           "trusted": True, "unsandboxed": True}
    config.write_text(yaml.safe_dump({"profile": str(profile), "store": str(tmp / "s.sqlite3"),
                                      "boxes": [box]}))
    return config


def _warm(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command as an operator runs it."""
    return subprocess.run([sys.executable, "-m", "evalbot", "warm-reference", "--config",
                           str(config), *args], capture_output=True, text=True, timeout=900,
                          cwd=REPO_ROOT, check=False)


def _calls(tmp: Path) -> list[int]:
    """Windows asked of the stub reference, per call."""
    return [json.loads(line)["windows"] for line in (tmp / "calls.jsonl").read_text().splitlines()]


def test_an_evaluation_on_a_warmed_box_runs_no_reference(demo: DemoRepo, tmp_path: Path) -> None:
    # the cut profile's grid and correctness, its speed at one look and no witness: what is
    # asked here is where the evaluation's reference comes from, not its speed verdict
    profile = one_look_demo_profile(tmp_path / "profile", NO_WITNESS)
    config = _config(tmp_path, demo, profile)
    got = CliRunner().invoke(cli, ["warm-reference", "--config", str(config), "--batch", "128"])
    assert got.exit_code == 0, got.output
    assert "tiny: " in got.output and f"({GRID} windows scored, 0 were cached)" in got.output
    again = CliRunner().invoke(cli, ["warm-reference", "--config", str(config)])
    assert f"(0 windows scored, {GRID} were cached)" in again.output  # nothing twice
    box_config = load_config(config).boxes[0]
    job = make_job(load_profile(str(profile)), POLICY, box_config, demo.main_sha,
                   demo.prs["neutral"], seed=1234)
    box = open_box(box_config)
    try:
        results = pipeline.evaluate(box, box_config, job, tmp_path / "out")
    finally:
        box.close()
    correctness = results["correctness"]
    scored = len(correctness["windows"])
    assert correctness["reference"]["cached"] == scored > 0
    assert correctness["reference"]["scored"] == 0
    logs = Path(box_config.workdir) / "jobs" / job.job_id / "logs"
    assert list(logs.glob("score-base-*.log"))  # the sides were scored ...
    assert not list(logs.glob("score-reference*")) and not (logs / "tokenize.log").exists()


def _engine_warm(tmp: Path, demo: DemoRepo, profile: Path, jobdir: str) -> subprocess.Popen[str]:
    """The harness's entry point, as the bot starts it on the box."""
    box_config = load_config(_config(tmp, demo, profile)).boxes[0]
    job = tmp / f"{jobdir}.json"
    job.write_text(warm_job(load_profile(str(profile)), POLICY, box_config).to_json())
    return subprocess.Popen([sys.executable, "-m", "engine", "warm-reference", str(job),
                             "--jobdir", str(tmp / "box" / "jobs" / jobdir), "--batch", "100"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)


def test_a_warm_up_killed_halfway_is_resumed_where_it_stopped(demo: DemoRepo,
                                                              tmp_path: Path) -> None:
    profile = _stub_profile(tmp_path)
    fifo = tmp_path / "hung"
    os.mkfifo(fifo)
    (tmp_path / "control.json").write_text(json.dumps({"hang_at": 2, "fifo": str(fifo)}))
    first = _engine_warm(tmp_path, demo, profile, "warm-1")
    assert first.stdout is not None
    plan, batch = first.stdout.readline(), first.stdout.readline()
    assert plan.startswith(f"warm-reference: 0/{GRID} windows, 0 cached, {GRID} to score (tiny)")
    assert batch.startswith(f"warm-reference: 100/{GRID} windows, tiny short windows 0-99, ")
    said, pid = fifo.read_text().split()  # the second batch's reference hangs: kill it there
    assert said == "hung"
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=120) == 128 + signal.SIGTERM
    assert not Path(f"/proc/{pid}").exists()  # killed with it, not left on the GPU
    status = json.loads((tmp_path / "box" / "jobs" / "warm-1" / "status.json").read_text())
    assert status["step"] == "done"  # housekeeping no longer takes it for a running job
    assert _calls(tmp_path) == [100, 100]  # no batch after the hung one
    (tmp_path / "control.json").unlink()
    second = _engine_warm(tmp_path, demo, profile, "warm-2")
    out, _ = second.communicate(timeout=600)
    assert second.returncode == 0, out
    assert out.startswith(f"warm-reference: 100/{GRID} windows, 100 cached, {GRID - 100} to score")
    assert sum(_calls(tmp_path)[2:]) == GRID - 100  # only the rest, each window once
    assert "tiny: " in out and f"({GRID - 100} windows scored, 100 were cached)" in out


def test_a_failed_score_run_names_its_windows_and_keeps_what_was_warmed(
        demo: DemoRepo, tmp_path: Path) -> None:
    config = _config(tmp_path, demo, _stub_profile(tmp_path))
    (tmp_path / "control.json").write_text(json.dumps({"fail_at": 3}))
    got = _warm(config, "--batch", "100")
    assert got.returncode == 1
    assert got.stderr.strip().splitlines() == [
        "error: warm-reference on box local failed (exit 1): tiny: the reference score run of "
        "short windows 200-299 failed: score run crashed (exit 7): reference: out of device "
        f"memory; 200 of {GRID} windows are cached, a rerun scores only the rest"]
    (tmp_path / "control.json").unlink()
    again = _warm(config, "--batch", "100")
    assert again.returncode == 0, again.stderr
    assert f"({GRID - 200} windows scored, 200 were cached)" in again.stdout
    assert sum(_calls(tmp_path)) == GRID + 100  # the failed batch, and every window once
    # what the failed run and its rerun warmed is the harness's alone, in the evaluations' cache
    box = tmp_path / "box"
    assert (box / "cache").stat().st_mode & 0o777 == 0o700
    entries = _cache_entries(box)
    assert len(entries) == GRID + 1  # and the manifest
    assert all(p.stat().st_mode & 0o077 == 0 and p.parent.stat().st_mode & 0o077 == 0
               for p in entries)
    jobs = sorted((box / "jobs").glob("warm-reference-*/job.json"))
    assert len(jobs) == 2
    for job in jobs:
        doc: dict[str, Any] = json.loads(job.read_text())
        assert doc["cache_dir"] == str(box / "cache")  # not a cache of its own


@pytest.mark.parametrize("problem", ["model", "reference build"])
def test_a_box_without_what_the_reference_needs_is_refused_in_one_line(
        demo: DemoRepo, tmp_path: Path, problem: str) -> None:
    if problem == "model":
        (tmp_path / "no-models").mkdir()
        config = _config(tmp_path, demo, _profile(tmp_path), tmp_path / "no-models")
        said = (f"model tiny: {tmp_path / 'no-models' / demo.model_path.name} is missing "
                "(No such file or directory)")
    else:  # the llamacpp profiles' reference, whose pinned build is not on this box
        argv = ["{python}", "{harness}/engine/llamacpp/score.py", "--reference", "git-6f4f53f",
                "--model", "{model}", "--tokens", "{tokens}", "--topk", "{topk}", "--out", "{out}"]
        config = _config(tmp_path, demo, _profile(tmp_path, argv))
        said = ("tiny: the reference score run of short windows 0-15 failed: score run crashed "
                "(exit 1): score failed: no llama.cpp reference build at "
                f"{demo.model_path.parent / 'llamacpp-reference' / 'git-6f4f53f'}")
    got = _warm(config)
    assert got.returncode == 1
    [line] = got.stderr.strip().splitlines()
    assert line.startswith("error: warm-reference on box local failed (exit 1): " + said), line


def test_an_ssh_box_is_warmed_through_its_connection(demo: DemoRepo, tmp_path: Path,
                                                     sshd: Sshd) -> None:
    config = _config(tmp_path, demo, _stub_profile(tmp_path))
    doc = yaml.safe_load(config.read_text())
    doc["boxes"] = [{**doc["boxes"][0], "name": "gpu1", "kind": "ssh", **sshd.box_kwargs(),
                     "sandbox_user": SANDBOX_USER, "sandbox_launcher": []}]
    for key in ("trusted", "unsandboxed"):
        doc["boxes"][0].pop(key)
    config.write_text(yaml.safe_dump(doc))
    got = _warm(config, "--batch", "300")
    assert got.returncode == 0, got.stdout + got.stderr
    assert "warming the reference on gpu1" in got.stdout  # the bar's label
    assert "tiny: " in got.stdout and f"({GRID} windows scored, 0 were cached)" in got.stdout
    assert len(_cache_entries(tmp_path / "box")) == GRID + 1
    assert "127.0.0.1" not in got.stdout + got.stderr and str(sshd.port) not in got.stdout


def test_the_whole_grid_is_every_window_a_seed_could_pick_long_ones_in_small_batches(
        demo: DemoRepo, tmp_path: Path) -> None:
    """The shipped demo profile, long windows included (too slow to warm here)."""
    config = _config(tmp_path, demo, _profile(tmp_path))
    job = make_job(load_profile("demo"), POLICY, load_config(config).boxes[0], demo.main_sha,
                   demo.main_sha, seed=1)
    spec = job.correctness
    assert spec is not None
    text, version = corpus_bytes()
    long, long_version = long_text(text)
    grid = whole_grid(spec, Stream(list(text), version, list(long), long_version))
    assert [w.kind for w in grid] == ["long"] * (len(long) // 1024) + ["short"] * GRID
    for seed in (1, 2, 3):  # whatever the seed picks is in it
        picked = plan(replace(spec, seed=seed), list(text), list(long))
        assert all(w in grid for w in picked)
    groups = batches(grid, spec, 16)
    for kind, full in (("long", 2), ("short", 16)):  # 16 x 128 ids = 2 x 1024
        sizes = [len(g) for g in groups if g[0].kind == kind]
        assert set(sizes[:-1]) == {full} and 0 < sizes[-1] <= full
    assert [w for g in groups for w in g] == grid  # each window once, in grid order


def _cache_entries(box: Path) -> list[Path]:
    return sorted(p for p in (box / "cache" / "reference").rglob("*") if p.is_file())
