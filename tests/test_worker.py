"""The worker and the pool on a real SQLite file, local boxes and the stub engine (no GitHub):
concurrency from recorded leases, build reuse, label routing, bounded infra retries, verdicts
that are not retried, a superseded run stopped on the box, staleness when main moves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from evalbot.config.errors import ConfigError
from evalbot.config.settings import Config
from evalbot.evaluation.profile import load_profile
from evalbot.grading.policy import load_labels
from evalbot.service.pool import check_pool
from evalbot.service.worker import Settings, Worker
from evalbot.store.jobs import Store
from tests.service_env import evalbot, wait_for, write_config
from tests.stub_engine import GIT_ENV, make_repo

POLICY = "default"
VARIANTS = {"faster": {"decode": 1300.0, "prefill": 1.3e6}, "neutral": {},
            "broken": {"build_fails": True}, "slow_run": {"work_s": 0.3}}


@pytest.fixture
def stub(tmp_path: Path) -> tuple[Path, str, dict[str, str]]:
    return make_repo(tmp_path / "engine", VARIANTS)


def _worker(config: Config, box: int = 0, **settings: float) -> Worker:
    profile = load_profile(config.profile)
    policy = load_labels(config.labels_file).policy(POLICY)
    return Worker(f"w{box}", config.boxes[box], profile, policy, config.store,
                  config.store.parent / "results",
                  Settings(**{"lease_ttl_s": 30.0, "backoff_s": 0.0, **settings}))  # type: ignore[arg-type]


def _ident(config: Config) -> str:
    return load_labels(config.labels_file).policy(POLICY).ident


def test_two_boxes_run_two_jobs_at_once_by_the_recorded_leases(
        tmp_path: Path, stub: tuple[Path, str, dict[str, str]]) -> None:
    repo, _main, shas = stub
    config = write_config(tmp_path, repo, boxes=2)
    store = Store(config.store)
    for pr, name in ((1, "faster"), (2, "neutral")):
        store.enqueue("o/r", pr, shas[name], _ident(config))
    log = tmp_path / "worker.log"
    proc = evalbot("worker", "--config", str(config.source), "--until-idle", log=log)
    assert proc.wait(timeout=50) == 0, log.read_text()
    a, b = store.leases()
    assert {a["box"], b["box"]} == {"box-0", "box-1"} and a["outcome"] == b["outcome"] == "done"
    assert max(a["started"], b["started"]) < min(a["ended"], b["ended"])  # the intervals overlap
    assert {h["verdict"]["kind"] for h in store.history()} == {"improved", "neutral"}


def test_the_base_build_is_reused_and_the_saved_time_reported(
        tmp_path: Path, stub: tuple[Path, str, dict[str, str]]) -> None:
    repo, main, shas = stub
    config = write_config(tmp_path, repo)
    store = Store(config.store)
    worker = _worker(config)
    for pr, name in ((1, "faster"), (2, "neutral")):
        store.enqueue("o/r", pr, shas[name], _ident(config))
        assert worker.step(store)
    second, first = store.history()
    assert first["base_sha"] == second["base_sha"] == main  # base: main when the job started
    assert not first["results"]["base"]["cached"] and second["results"]["base"]["cached"]
    original = first["results"]["base"]["duration_s"]
    assert second["saved_s"] == pytest.approx(original, abs=1e-3) and original > 0
    out = subprocess.run([sys.executable, "-m", "evalbot", "status", "--store",
                          str(config.store), "--config", str(config.source), "--json"],
                         capture_output=True, text=True, check=True).stdout
    snap = json.loads(out)
    assert snap["box_time"][0]["build_s_saved"] == round(original)
    assert snap["boxes"] == [{"name": "box-0", "kind": "local", "labels": [], "state": "idle",
                              "job": None}]
    assert [v["saved_s"] for v in snap["verdicts"]] == [round(original), 0]


def test_jobs_go_only_to_boxes_with_the_profiles_labels(
        tmp_path: Path, stub: tuple[Path, str, dict[str, str]]) -> None:
    repo, _main, _shas = stub
    config = write_config(tmp_path, repo, boxes=2, labels=("sm_120",),
                          box_labels=(("h200",), ("sm_120", "rtx5090")))
    profile = load_profile(config.profile)
    assert [b.name for b in check_pool(config, profile, serving=True)] == ["box-1"]
    lonely = write_config(tmp_path / "other", repo, boxes=1, labels=("sm_120",),
                          box_labels=(("h200",),))
    with pytest.raises(ConfigError, match="no box carries the labels"):
        check_pool(lonely, load_profile(lonely.profile), serving=True)


def test_serve_refuses_a_local_box_not_marked_trusted(
        tmp_path: Path, stub: tuple[Path, str, dict[str, str]]) -> None:
    config = write_config(tmp_path, stub[0], trusted=False)
    got = subprocess.run([sys.executable, "-m", "evalbot", "serve", "--config",
                          str(config.source), "--port", "0"], capture_output=True, text=True,
                         timeout=60)
    assert got.returncode == 1
    assert "box-0 is local but not marked `trusted: true`" in got.stderr


def test_infra_errors_are_retried_with_backoff_then_one_failure_verdict(
        tmp_path: Path, stub: tuple[Path, str, dict[str, str]]) -> None:
    _repo, _main, shas = stub
    config = write_config(tmp_path, tmp_path / "no-such-repo")  # main cannot be resolved
    store = Store(config.store)
    job = store.enqueue("o/r", 1, shas["faster"], _ident(config))
    worker = _worker(config, max_tries=3, backoff_s=0.2)
    while store.get(job.id).state != "failed":
        worker.step(store)
    leases = store.leases(job.id)
    assert [lease["outcome"] for lease in leases] == ["retry", "retry", "failed"]
    for before, after, wait in zip(leases, leases[1:], (0.2, 0.4), strict=False):
        assert after["started"] >= before["ended"] + wait  # exponential back-off, on record
    [row] = store.history()
    assert row["verdict"]["kind"] == "infra-error" and row["results"] == {}
    assert "gave up after 3 attempts" in row["verdict"]["failures"][0]["message"]
    comment = (config.store.parent / "results" / job.id / "comment.md").read_text()
    assert "cannot resolve main" in comment and "eval:infra-error" in comment


def test_a_prs_build_failure_is_a_verdict_not_retried(
        tmp_path: Path, stub: tuple[Path, str, dict[str, str]]) -> None:
    repo, _main, shas = stub
    config = write_config(tmp_path, repo)
    store = Store(config.store)
    job = store.enqueue("o/r", 1, shas["broken"], _ident(config))
    assert _worker(config).step(store)
    assert store.get(job.id).state == "done" and store.get(job.id).tries == 1
    assert store.history()[0]["verdict"]["kind"] == "build-failed"


def test_a_push_during_the_run_stops_the_harness_on_the_box(
        tmp_path: Path, stub: tuple[Path, str, dict[str, str]]) -> None:
    repo, _main, shas = stub
    config = write_config(tmp_path, repo)
    store = Store(config.store)
    old = store.enqueue("o/r", 1, shas["slow_run"], _ident(config))
    worker = _worker(config, lease_ttl_s=0.6)
    thread = threading.Thread(target=lambda: worker.step(Store(config.store)))  # own connection
    thread.start()
    status = Path(config.boxes[0].workdir) / "jobs" / old.id / "status.json"
    wait_for("the old head's measurement", lambda: status.is_file() and json.loads(
        status.read_text())["step"] == "speed")
    pid = int((status.parent / "harness.pid").read_text())
    new = store.enqueue("o/r", 1, shas["faster"], _ident(config))  # the push
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert store.get(old.id).state == "superseded" and store.history() == []
    assert [lease["outcome"] for lease in store.leases(old.id)] == ["superseded"]
    assert not (status.parent / "results.json").exists()
    assert not _alive(pid)  # killed on the box, not left to finish
    assert worker.step(store) and store.get(new.id).state == "done"


def test_when_main_moves_verdicts_go_stale_and_merge_candidates_are_remeasured(
        tmp_path: Path, stub: tuple[Path, str, dict[str, str]]) -> None:
    repo, main, shas = stub
    config = write_config(tmp_path, repo)
    store = Store(config.store)
    worker = _worker(config)
    improved = store.enqueue("o/r", 1, shas["faster"], _ident(config))
    neutral = store.enqueue("o/r", 2, shas["neutral"], _ident(config))
    assert worker.step(store) and worker.step(store)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "main moves"], cwd=repo,
                   env={**os.environ, **GIT_ENV}, check=True)
    store.enqueue("o/r", 3, shas["slow_run"], _ident(config))
    assert worker.step(store)
    stale = {h["job_id"]: h["stale"] for h in store.history()}
    assert stale[improved.id] and stale[neutral.id]
    [again] = [j for j in store.jobs("queued")]
    assert (again.pr, again.head_sha, again.attempt) == (1, shas["faster"], 2)  # only PR 1's
    assert worker.step(store)
    newest = store.history(pr=1)[0]
    assert newest["job_id"] == again.id and newest["base_sha"] != main and not newest["stale"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.is_file() and stat.read_text().split(") ")[-1][0] != "Z"  # a zombie is dead


def test_a_verdict_that_cannot_be_graded_or_signed_is_an_infra_error_not_a_dead_worker(
        tmp_path: Path, stub: tuple[Path, str, dict[str, str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection at the grader (a NaN that signing refuses): the worker records an
    infra-error verdict and goes on; it used to die on SignatureError (not a PipelineError)."""
    from evalbot.audit.signing import SignatureError
    from evalbot.service import worker as worker_module

    def unsignable(*_args: object) -> dict[str, object]:
        raise SignatureError("verdict cannot be encoded canonically: Out of range float values")

    repo, _main, shas = stub
    config = write_config(tmp_path, repo)
    store = Store(config.store)
    job = store.enqueue("o/r", 1, shas["neutral"], _ident(config))
    monkeypatch.setattr(worker_module, "grade", unsignable)
    worker = _worker(config, max_tries=1)
    assert worker.step(store)  # returns: the worker thread is alive
    row = store.get(job.id)
    assert row.state == "failed"
    [record] = store.history()
    assert record["verdict"]["kind"] == "infra-error"
    assert "grading failed (SignatureError)" in record["verdict"]["failures"][0]["message"]
