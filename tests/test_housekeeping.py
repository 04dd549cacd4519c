"""Housekeeping on real directories with real processes: by age, by disk budget, never what a
running job uses; and the same through the SSH box against a real sshd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalbot.config.settings import BoxConfig
from evalbot.engine.harness.housekeeping import KEEP, Retention, build_keys, housekeep, main
from evalbot.remote.ssh import SSHBox, SSHTarget
from evalbot.service.upkeep import housekeep_box
from tests.stub_engine import job_doc

DAY = 86400.0
OLD = 100 * DAY  # past every default retention (jobs 14, builds 30, references 90 days)


@pytest.fixture
def live_pid() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "300"])
    yield proc.pid
    proc.kill()
    proc.wait()


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _age(path: Path, seconds: float) -> None:
    """Set the mtime of path and everything under it `seconds` into the past."""
    when = time.time() - seconds
    for p in sorted(path.rglob("*"), reverse=True) + [path]:
        os.utime(p, (when, when), follow_symlinks=False)


def _job(work: Path, name: str, *, step: str | None, pid: int | None, base: str, head: str,
         size: int = 1000, age: float = OLD) -> Path:
    jobdir = work / "jobs" / name
    jobdir.mkdir(parents=True)
    doc = job_doc(Path("/nonexistent"), base, head)
    doc["cache_dir"] = str(work / "cache")
    (jobdir / "job.json").write_text(json.dumps(doc))
    (jobdir / "harness.log").write_bytes(b"x" * size)
    if step is not None:
        (jobdir / "status.json").write_text(json.dumps({"step": step, "pid": pid}))
    _age(jobdir, age)
    return jobdir


def _build(work: Path, key: str, size: int, age: float = OLD) -> Path:
    entry = work / "cache" / "builds" / key
    (entry / "files").mkdir(parents=True)
    (entry / "files" / "engine").write_bytes(b"b" * size)
    (entry / "manifest.json").write_text("{}")
    _age(entry, age)
    return entry


def _reference(work: Path, name: str, size: int, age: float = OLD) -> Path:
    path = work / "cache" / "reference" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"r" * size)
    _age(path, age)
    return path


def _layout(work: Path, live: int) -> dict[str, Path]:
    A, B, C, D = "a" * 40, "b" * 40, "c" * 40, "d" * 40
    paths = {
        "done": _job(work, "done", step="done", pid=live, base=A, head=B),
        "running": _job(work, "running", step="speed", pid=live, base=A, head=C),
        "dead": _job(work, "dead", step="speed", pid=dead_pid(), base=A, head=D),
        "pinned": _job(work, "pinned", step="done", pid=None, base=A, head=D),
        "fresh": _job(work, "fresh", step=None, pid=None, base=A, head=D, age=10.0),
        "ref": _reference(work, "r1.json", 5000),
    }
    (paths["pinned"] / KEEP).write_text("kept for a bisect\n")
    _age(paths["pinned"], OLD)
    keys = sorted(build_keys(paths["running"]))
    paths["used-build"] = _build(work, keys[0], 4000)  # the running job's base build
    paths["old-build"] = _build(work, "0" * 32, 4000)
    paths["tmp-build"] = _build(work, "1" * 32 + ".tmp", 100)
    return paths


def test_age_eviction_spares_running_pinned_and_fresh_jobs_and_their_caches(tmp_path, live_pid):
    work = tmp_path / "work"
    p = _layout(work, live_pid)
    report = housekeep(work, Retention())
    gone = {(e["kind"], e["name"]) for e in report.evicted}
    assert gone == {("job", "done"), ("job", "dead"), ("build", "0" * 32)}
    for name in ("running", "pinned", "fresh", "ref", "used-build", "tmp-build"):
        assert p[name].exists(), name
    assert not p["done"].exists() and not p["dead"].exists() and not p["old-build"].exists()
    kept = "\n".join(report.in_use)
    assert "job running: running" in kept and f"pinned by {KEEP}" in kept
    assert "used by a running job" in kept and "a job is running" in kept
    assert report.bytes_after < report.bytes_before and report.errors == []


def test_once_the_job_ends_its_caches_may_go(tmp_path, live_pid):
    work = tmp_path / "work"
    p = _layout(work, live_pid)
    (p["running"] / "status.json").write_text(json.dumps({"step": "done", "pid": live_pid}))
    _age(p["running"], OLD)
    housekeep(work, Retention(grace_s=5.0))  # the 10 s old job is no longer starting
    assert not p["running"].exists() and not p["used-build"].exists()
    assert not p["ref"].exists() and not p["tmp-build"].exists()
    assert p["fresh"].exists() and p["pinned"].exists()


def test_budget_evicts_oldest_use_first_and_reports_what_is_in_use(tmp_path, live_pid):
    work = tmp_path / "work"
    newer = _build(work, "2" * 32, 3000, age=1 * DAY)
    older = _build(work, "3" * 32, 3000, age=2 * DAY)
    running = _job(work, "running", step="speed", pid=live_pid, base="a" * 40, head="c" * 40,
                   size=6000)
    total = sum(f.stat().st_size for f in work.rglob("*") if f.is_file())
    report = housekeep(work, Retention(budget_bytes=total - 1000))
    assert [e["name"] for e in report.evicted] == ["3" * 32]  # one old build is enough
    assert not older.exists() and newer.exists() and running.exists()
    report = housekeep(work, Retention(budget_bytes=1000))  # cannot be met: all else in use
    assert not newer.exists() and running.exists()
    assert report.over_budget == report.bytes_after - 1000 > 0


def test_mains_scores_last_as_long_as_builds_and_stay_while_a_job_runs(tmp_path, live_pid):
    work = tmp_path / "work"
    folder = work / "cache" / "main-scores"
    old, recent = _reference(work, "x.json", 10), _reference(work, "y.json", 10)
    for path, age in ((old, 31 * DAY), (recent, 29 * DAY)):  # builds: 30 days
        (folder / path.stem).mkdir(parents=True, exist_ok=True)
        path.rename(folder / path.stem / "e.json")
        _age(folder / path.stem, age)
    running = _job(work, "running", step="speed", pid=live_pid, base="a" * 40, head="c" * 40)
    report = housekeep(work, Retention())
    assert (folder / "x").exists() and "main-scores x: a job is running" in "\n".join(report.in_use)
    (running / "status.json").write_text(json.dumps({"step": "done", "pid": live_pid}))
    _age(running, OLD)
    report = housekeep(work, Retention(grace_s=5.0))
    assert ("main-scores", "x") in {(e["kind"], e["name"]) for e in report.evicted}
    assert not (folder / "x").exists() and (folder / "y").exists()


def test_dry_run_and_command_line(tmp_path, live_pid, capsys):
    work = tmp_path / "work"
    p = _layout(work, live_pid)
    assert main(["--workdir", str(work), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would evict job done" in out and "kept job running" in out
    assert p["done"].exists()  # nothing removed
    assert main(["--workdir", str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main(["--workdir", str(work), "--jobs-days", "-1"]) == 2


# ---- through the SSH box ---------------------------------------------------------------------


def test_housekeeping_over_ssh(tmp_path, live_pid, sshd):
    work = tmp_path / "work"
    p = _layout(work, live_pid)
    box_config = BoxConfig(name="gpu1", kind="ssh", workdir=str(work), repo="",
                           python=sys.executable)
    box = SSHBox("gpu1", str(work), SSHTarget(**sshd.box_kwargs()))  # type: ignore[arg-type]
    try:
        report = housekeep_box(box, box_config, ["--budget-gb", "0.000001"])  # 1000 bytes
    finally:
        box.close()
    assert {e["name"] for e in report["evicted"]} >= {"done", "dead", "0" * 32}
    assert p["running"].exists() and p["used-build"].exists() and p["ref"].exists()
    assert p["pinned"].exists() and p["fresh"].exists()
    assert not p["done"].exists() and report["over_budget"] > 0
    assert (work / "tools" / "harness" / "engine" / "harness" / "housekeeping.py").is_file()
