"""The pipeline over a real sshd with the sandbox on: dropped connections, a restarted sshd, a
killed harness, a busy box, a re-attaching bot, a tampered harness, and who is at fault."""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.errors import PipelineError
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.job import Job, parse_job
from evalbot.evaluation import pipeline
from evalbot.evaluation.reconnect import Connection
from evalbot.remote.ssh import SSHBox, SSHTarget
from tests.sshd import SANDBOX_USER, Sshd, ensure_sandbox_user, pin_model, system_python
from tests.stub_engine import job_doc, make_repo

VARIANTS = {"faster": {"decode": 1300.0, "prefill": 1.3e6, "work_s": 0.05},
            "build_fails": {"build_fails": True}}


@pytest.fixture(scope="module")
def stub() -> Iterator[tuple[Path, str, dict[str, str]]]:
    ensure_sandbox_user()
    with tempfile.TemporaryDirectory(prefix="evalbot-stub-") as tmp:
        yield make_repo(Path(tmp), VARIANTS, main={"work_s": 0.05})


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="evalbot-box-") as tmp:
        os.chmod(tmp, 0o711)  # the sandbox user must traverse to its job directory
        yield Path(tmp)


def _config(workdir: Path, repo: Path, python: str = sys.executable) -> BoxConfig:
    return BoxConfig(name="gpu1", kind="ssh", workdir=str(workdir), repo=str(repo),
                     python=python, sandbox_user=SANDBOX_USER)  # root harness: no sudo


def _box(sshd: Sshd, workdir: Path) -> SSHBox:
    return SSHBox("gpu1", str(workdir), SSHTarget(**sshd.box_kwargs()))  # type: ignore[arg-type]


def _job(stub: tuple[Path, str, dict[str, str]], head: str, base: str | None = None,
         job_id: str = "job1") -> Job:
    repo, main, shas = stub
    doc: dict[str, Any] = job_doc(repo, base or main, shas[head], looks=[3, 4])
    pin_model(doc, repo.parent)
    py = system_python()  # PR code runs as the sandbox user: a system interpreter it may run
    doc.update(job_id=job_id, build_argv=[py, "build.py"])
    doc["runs"][0]["argv"][0] = py
    return parse_job(doc)


def _harness_children(pid: int) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == pid]


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError):
        return -1


def _evaluate(sshd: Sshd, workdir: Path, stub: Any, job: Job, tmp_path: Path,
              on_status: Any = None) -> tuple[dict[str, Any], Connection]:
    box = _box(sshd, workdir)
    conn = Connection(box, "gpu1", budget_s=60)
    try:
        results = pipeline.evaluate(box, _config(workdir, stub[0]), job, tmp_path,
                                    progress=on_status, connection=conn)
    finally:
        box.close()
    return results, conn


class OnFirst:
    """Runs `action` once, when the harness first reports the speed step."""

    def __init__(self, action: Any) -> None:
        self.action, self.step_at_fault = action, ""

    def __call__(self, status: dict[str, Any]) -> None:
        if status.get("step") == "speed" and not self.step_at_fault:
            self.step_at_fault = "speed"
            self.action()


def _assert_complete(results: dict[str, Any], workdir: Path) -> None:
    assert results["failures"] == []
    for cell in results["cells"]:
        kept = [s for s in cell["samples"] if not s["dropped"]]
        assert len(kept) == 2 * cell["looks"][-1]["pairs"]  # every pair, none twice
    assert [p.name for p in (workdir / "jobs").iterdir()] == ["job1"]  # started exactly once


def test_dropped_connection_mid_measurement_costs_only_a_reconnect(sshd, stub, workdir, tmp_path):
    fault = OnFirst(sshd.drop_connections)
    results, conn = _evaluate(sshd, workdir, stub, _job(stub, "faster"), tmp_path, fault)
    assert fault.step_at_fault == "speed"
    _assert_complete(results, workdir)
    reconnects = [e for e in conn.events if e["event"] == "reconnected"]
    assert len(reconnects) == 1
    print(f"\nreconnect after a dropped connection: {reconnects[0]['after_s']} s")


def test_sshd_restart_mid_measurement_is_survived(sshd, stub, workdir, tmp_path):
    def restart() -> None:
        sshd.stop()
        threading.Timer(1.5, sshd.start).start()  # down long enough for several attempts

    fault = OnFirst(restart)
    results, conn = _evaluate(sshd, workdir, stub, _job(stub, "faster"), tmp_path, fault)
    _assert_complete(results, workdir)
    reconnect = next(e for e in conn.events if e["event"] == "reconnected")
    assert reconnect["attempts"] >= 2
    print(f"\nreconnect after an sshd restart: {reconnect['after_s']} s")


def test_killed_harness_is_a_clean_infra_error_and_frees_the_box(sshd, stub, workdir, tmp_path):
    def kill_harness() -> None:
        flock_pid = int((workdir / "jobs" / "job1" / "harness.pid").read_text())
        for pid in _harness_children(flock_pid):
            os.kill(pid, signal.SIGKILL)

    with pytest.raises(PipelineError, match=r"exited without writing its results \(last step: "
                                            r"speed\)"):
        _evaluate(sshd, workdir, stub, _job(stub, "faster"), tmp_path, OnFirst(kill_harness))
    box = _box(sshd, workdir)
    pipeline.check_lock(box, _config(workdir, stub[0]))  # the lock died with the harness
    box.close()


def test_busy_box_is_refused_while_another_evaluation_holds_its_lock(sshd, stub, workdir,
                                                                       tmp_path):
    with open(workdir / "box.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(PipelineError, match="busy: another evaluation holds its lock"):
            _evaluate(sshd, workdir, stub, _job(stub, "faster"), tmp_path)
    assert not (workdir / "jobs" / "job1").exists()


def test_a_restarted_bot_reattaches_instead_of_starting_again(sshd, stub, workdir, tmp_path):
    job = _job(stub, "faster")
    first = _box(sshd, workdir)
    run = pipeline.launch(first, _config(workdir, stub[0]), job)
    first.close()  # the bot dies here; the harness runs on
    results, _ = _evaluate(sshd, workdir, stub, job, tmp_path)
    _assert_complete(results, workdir)
    assert int((workdir / "jobs" / "job1" / "harness.pid").read_text()) == run.pid


def test_a_harness_that_does_not_hash_right_is_never_run(sshd, stub, workdir, tmp_path):
    box = _box(sshd, workdir)
    config = _config(workdir, stub[0], python="/bin/echo")  # answers anything but the hash
    with pytest.raises(PipelineError, match="does not match ours; not running it"):
        pipeline.evaluate(box, config, _job(stub, "faster"), tmp_path)
    box.close()
    assert not (workdir / "jobs" / "job1" / "harness.pid").exists()


def test_head_build_failure_is_the_prs_and_base_failure_is_infra(sshd, stub, workdir, tmp_path):
    head, _ = _evaluate(sshd, workdir, stub, _job(stub, "build_fails"), tmp_path / "h")
    assert [(f["side"], f["kind"], f["attribution"]) for f in head["failures"]] == \
        [("head", "build-failed", "pr")]
    base, _ = _evaluate(sshd, workdir, stub,
                        _job(stub, "faster", base=stub[2]["build_fails"], job_id="job2"),
                        tmp_path / "b")
    assert [(f["side"], f["kind"], f["attribution"]) for f in base["failures"]] == \
        [("base", "infra-error", "infra")]
