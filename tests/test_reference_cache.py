"""The reference's cache on the box (engine/scoring/reference_cache.py), with the demo's real float64
reference (engine/demo/reference.py) on the demo corpus: its key, what is read back, what is scored
again, and the reference of a long window scored deep only (`long_scored: deep`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.settings import REPO_ROOT, BoxConfig
from evalbot.engine.contract.job import Job
from evalbot.engine.demo import DemoRepo, generate
from evalbot.engine.demo.reference import score_windows
from evalbot.engine.harness.housekeeping import Retention, housekeep
from evalbot.engine.measure.gpu import device_identity
from evalbot.engine.sandbox import safe_io
from evalbot.engine.scoring.correctness import score
from evalbot.engine.scoring.reference_cache import ReferenceCache, cache_key, reference_build
from evalbot.engine.scoring.tokens import speed_tokens, token_stream
from evalbot.engine.scoring.windows import Window, grid_windows
from evalbot.engine.sides.build import Built
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import load_profile
from evalbot.grading.policy import load_labels
from tests.test_correctness_deep import SCORER

POLICY = load_labels(REPO_ROOT / "labels.yaml").policy("default")
DEVICE = "cpu the test's"  # a device name; the real one is engine/measure/gpu.py's
DEEP = 100  # deep positions at the end of the demo's 1024-id long windows

KEY = {"model_sha256": "a" * 64, "recipe": ["{python}", "-m", "engine.demo.reference", "score"],
       "text_version": "5f3a9e1c0d2b4a68/7c1e", "window_tokens": 128, "topk": 8,
       "first_scored": 0, "device": "gpu NVIDIA H100 80GB HBM3, 550.54.15", "build": ""}


@pytest.mark.parametrize("change", [
    {"model_sha256": "b" * 64},
    {"recipe": ["{python}", "{harness}/engine/llamacpp/score.py", "--reference", "git-6f4f53f"]},
    {"text_version": "5f3a9e1c0d2b4a68/9d02"},  # another tokenizer of the same corpus
    {"window_tokens": 256},
    {"topk": 16},
    {"first_scored": 32767},  # a long window scored from its first deep position
    {"device": "gpu NVIDIA H100 80GB HBM3, 555.42.02"},  # another driver
    {"device": "gpu NVIDIA H200, 550.54.15"},
    {"device": "cpu AMD EPYC 9654 96-Core Processor"},  # the CPU build of the same reference
    {"build": "10971c26a0b1c2d3e4f5a6b7"},  # the carried build, not the box's own
], ids=lambda change: next(iter(change)))
def test_each_thing_the_reference_depends_on_changes_its_cache_key(change: dict[str, Any]) -> None:
    assert cache_key(**KEY) == cache_key(**dict(KEY))  # a function of its arguments alone
    assert cache_key(**{**KEY, **change}) != cache_key(**KEY)
    assert len(cache_key(**KEY)) == 24 and int(cache_key(**KEY), 16) >= 0  # a folder name


@pytest.mark.parametrize(("smi", "device"), [
    ('echo "NVIDIA H100 80GB HBM3, 550.54.15"', "gpu NVIDIA H100 80GB HBM3, 550.54.15"),
    ("echo 'NVIDIA-SMI has failed' >&2; exit 9", "gpu unidentified"),  # never "cpu ..."
    (None, "cpu "),
])
def test_the_device_is_the_gpu_and_its_driver_else_the_cpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, smi: str | None, device: str) -> None:
    """The real query against a stand-in nvidia-smi (this machine has no GPU)."""
    if smi is not None:
        tool = tmp_path / "nvidia-smi"
        tool.write_text(f"#!/bin/sh\n{smi}\n")
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    got = device_identity()
    assert got == device if smi is not None else (got.startswith(device) and len(got) > 4)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRepo:
    return generate(tmp_path_factory.mktemp("demo"))


def _job(demo: DemoRepo, tmp_path: Path, **spec: Any) -> Job:
    box = BoxConfig(name="local", kind="local", workdir=str(tmp_path / "box"),
                    repo=str(demo.path), models_dir=str(demo.model_path.parent), trusted=True,
                    python=sys.executable)
    job = make_job(load_profile("demo"), POLICY, box, demo.main_sha, demo.main_sha, seed=3)
    assert job.correctness is not None
    return replace(job, correctness=replace(job.correctness, **spec))


def _cache(job: Job, tmp_path: Path, device: str = DEVICE) -> ReferenceCache:
    jobdir = tmp_path / "job"
    jobdir.mkdir(exist_ok=True)
    return ReferenceCache(job, token_stream(job, jobdir, REPO_ROOT), device, jobdir, REPO_ROOT)


def _short(cache: ReferenceCache, n: int = 4) -> list[Window]:
    return grid_windows(cache.stream.ids, cache.spec.window_tokens, "short")[:n]


def _long(cache: ReferenceCache) -> list[Window]:
    return grid_windows(cache.stream.long_ids, cache.spec.long_window_tokens, "long")[:1]


def _ran_reference(cache: ReferenceCache) -> bool:
    return any((cache.jobdir / "logs").glob("score-reference-*.log"))


def _forget_runs(cache: ReferenceCache) -> None:
    for log in (cache.jobdir / "logs").glob("score-reference-*.log"):
        log.unlink()


def test_the_demo_reference_scored_from_a_position_is_its_whole_window_from_there(
        demo: DemoRepo, tmp_path: Path) -> None:
    window = list(range(40, 140))
    whole = score_windows(demo.model_path, [window], 8)["windows"][0]
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"windows": [window, window[:50]], "score_from": [60, 0]}))
    out = tmp_path / "out.json"
    subprocess.run([sys.executable, "-m", "engine.demo.reference", "score", "--model",
                    str(demo.model_path), "--tokens", str(tokens), "--topk", "8", "--out",
                    str(out)], cwd=REPO_ROOT, check=True, timeout=120)
    deep, short = json.loads(out.read_text())["windows"]
    assert len(deep["top"]) == 99 - 60 and len(short["top"]) == 49
    assert {k: v[60:] for k, v in whole.items()} == deep  # the same numbers, from position 60


def test_a_cached_window_is_read_back_and_no_reference_runs(demo: DemoRepo,
                                                            tmp_path: Path) -> None:
    cache = _cache(_job(demo, tmp_path), tmp_path)
    windows = _short(cache) + _long(cache)
    first, got = cache.references(windows)
    assert got == {"cached": 0, "scored": 5} and _ran_reference(cache)
    _forget_runs(cache)
    again, got = cache.references(windows)
    assert got == {"cached": 5, "scored": 0} and not _ran_reference(cache)
    assert again == first
    entries = sorted(p.name for p in cache.folder("short").iterdir())
    assert entries == ["0.json", "1.json", "2.json", "3.json", "manifest.json"]
    assert all(p.stat().st_mode & 0o077 == 0 for p in cache.folder("short").iterdir())


def _tamper(cache: ReferenceCache, window: Window, how: str) -> None:
    entry = cache.folder(window.kind) / f"{window.index}.json"
    rows = json.loads(entry.read_text())
    if how == "bytes":  # the file changed behind the manifest's back
        entry.write_text(json.dumps(rows[::-1]))
        return
    if how == "nan":
        rows[3]["top"][0][1] = float("nan")
    elif how == "vocab":  # an id of another vocabulary: the demo model has 256
        rows[3]["top"][0][0] = 300
    elif how == "short":
        rows = rows[:-1]
    safe_io.cache_put(entry, rows)  # file and manifest agree: only the rows can tell


@pytest.mark.parametrize("how", ["bytes", "nan", "vocab", "short"])
def test_a_tampered_entry_is_refused_and_scored_again(demo: DemoRepo, tmp_path: Path,
                                                       how: str) -> None:
    cache = _cache(_job(demo, tmp_path), tmp_path)
    windows = _short(cache)
    first, _ = cache.references(windows)
    _tamper(cache, windows[1], how)
    again, got = cache.references(windows)
    assert got == {"cached": 3, "scored": 1}
    assert again == first  # the true reference again, and cached as such
    assert cache.lookup(windows) == first


def test_another_device_s_entries_are_never_read(demo: DemoRepo, tmp_path: Path) -> None:
    job = _job(demo, tmp_path)
    cpu = _cache(job, tmp_path)
    cpu.references(_short(cpu))
    gpu = _cache(job, tmp_path, device="gpu NVIDIA H100 80GB HBM3, 550.54.15")
    assert gpu.folder("short") != cpu.folder("short")
    assert gpu.lookup(_short(gpu)) == {}
    _forget_runs(gpu)
    _, got = gpu.references(_short(gpu))
    assert got == {"cached": 0, "scored": 4} and _ran_reference(gpu)


def test_deep_entries_and_whole_windows_are_never_read_as_one_another(
        demo: DemoRepo, tmp_path: Path) -> None:
    whole = _cache(_job(demo, tmp_path), tmp_path)
    deep = _cache(_job(demo, tmp_path, long_scored="deep", long_score_tokens=DEEP), tmp_path)
    [window] = _long(deep)
    assert deep.first_scored(window) == 1023 - DEEP and whole.first_scored(window) == 0
    assert deep.folder("long") != whole.folder("long")
    assert deep.folder("short") == whole.folder("short")  # short windows are whole either way
    deep_rows, _ = deep.references([window])
    whole_rows, _ = whole.references([window])
    assert len(deep_rows["long", 0]) == DEEP and len(whole_rows["long", 0]) == 1023
    assert deep_rows["long", 0] == whole_rows["long", 0][-DEEP:]  # only the judged positions
    # entries put where the other kind's live (file and manifest agreeing) are still refused
    safe_io.cache_put(whole.folder("long") / "0.json", deep_rows["long", 0])
    safe_io.cache_put(deep.folder("long") / "1.json", whole_rows["long", 0])
    other = Window(1, "long", window.tokens)  # the same ids under another grid index
    assert whole.lookup([window]) == {} and deep.lookup([other]) == {}


def test_a_read_is_a_use_that_housekeeping_sees(demo: DemoRepo, tmp_path: Path) -> None:
    """Housekeeping evicts a reference folder by its mtime: a warmed folder read by every
    evaluation but never written again must not look unused."""
    cache = _cache(_job(demo, tmp_path), tmp_path)
    cache.references(_short(cache))
    folder = cache.folder("short")
    long_ago = time.time() - 200 * 86400
    os.utime(folder, (long_ago, long_ago))
    assert cache.lookup(_short(cache))
    assert folder.stat().st_mtime > long_ago + 100 * 86400
    report = housekeep(tmp_path / "box", Retention(reference_days=90))
    assert report.evicted == [] and folder.is_dir()


def _section(demo: DemoRepo, tmp_path: Path, long_scored: str) -> dict[str, Any]:
    """main against main through the harness's scoring: the demo's plan, its real reference,
    sides that predict every next id (they take score_from like the reference)."""
    stub = tmp_path / "scorer.py"
    stub.write_text(SCORER)
    argv = [sys.executable, str(stub), "{tokens}", "{out}", "{topk}", "{build}"]
    job = _job(demo, tmp_path, score_argv=argv, long_score_tokens=DEEP, long_scored=long_scored)
    built = {side: Built(side, "0" * 40, True, 0.0, False, tmp_path) for side in ("base", "head")}
    jobdir = tmp_path / f"job-{long_scored}"
    jobdir.mkdir(exist_ok=True)
    speed_tokens(jobdir, job, REPO_ROOT)
    return score(job, built, jobdir, REPO_ROOT, device=device_identity())


def test_a_long_window_scored_deep_gets_the_reference_of_its_deep_positions_alone(
        demo: DemoRepo, tmp_path: Path) -> None:
    every = _section(demo, tmp_path, "all")
    deep = _section(demo, tmp_path, "deep")
    # cold: each scores the windows its seed picks (8 short, 2 long), and caches them; the
    # short ones are cached alike, the long ones under their own key
    assert every["reference"] == {"cached": 0, "scored": 10, "device": device_identity()}
    assert deep["reference"] == {"cached": 8, "scored": 2, "device": device_identity()}
    cached = sorted((tmp_path / "box" / "cache" / "reference").rglob("[0-9]*.json"))
    assert len(cached) == 8 + 2 + 2
    # the deep chunks: the reference sliced like the sides, the same numbers either way
    chunks = {(c["window"], c["first_position"]): c for c in every["chunks"] if c["kind"] == "deep"}
    assert [c["kind"] for c in deep["chunks"]].count("deep") == len(chunks) == 16
    for c in deep["chunks"]:
        if c["kind"] == "deep":
            assert c == chunks[c["window"], c["first_position"]]
    again = _section(demo, tmp_path, "deep")
    assert again["reference"] == {"cached": 10, "scored": 0, "device": device_identity()}
    assert again["chunks"] == deep["chunks"]


def test_the_reference_build_is_named_by_its_manifests_artifacts(tmp_path: Path) -> None:
    recipe = ["{python}", "{harness}/engine/llamacpp/score.py", "--reference", "git-6f4f53f",
              "--model", "{model}"]
    model = tmp_path / "m.gguf"
    ref = tmp_path / "llamacpp-reference" / "git-6f4f53f"
    assert reference_build(recipe, str(model)) == "unread"  # no build: no entry can match one
    ref.mkdir(parents=True)
    (ref / "manifest.json").write_text(json.dumps({"artifacts": {"evalbot-topk": "a" * 64}}))
    carried = reference_build(recipe, str(model))
    (ref / "manifest.json").write_text(json.dumps({"artifacts": {"evalbot-topk": "b" * 64}}))
    built_here = reference_build(recipe, str(model))
    assert len({carried, built_here, "unread", ""}) == 4
    assert reference_build(KEY["recipe"], str(model)) == ""  # the demo's reference: no build
