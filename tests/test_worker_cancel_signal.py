"""The `work` job's side of `/evalbot cancel` with the single self-hosted runner busy.

The step's entry point (`evalbot worker ... --on-signal cancel --run-url URL`) runs as a real
process against the fake GitHub, evaluating a PR whose head hangs in the sandbox of a local
box (root harness, per-checkout sandbox user). The workflow's `cancel` code (what the hosted
job runs) cancels the run through the fake's Actions API, and the fake's "runner" then signals
the step as GitHub's runner does: SIGINT, SIGTERM 7.5 s later, the kill 2.5 s after that
(docs.github.com, workflow cancellation reference). Final state: the job cancelled in the
store, the PR's comment and status say so, no process left of the sandbox user, the step gone.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalbot.github import run_cancel
from evalbot.store.jobs import Store
from tests.demo_box import box_python  # noqa: F401 (a fixture)
from tests.github.accounts import PACING
from tests.github.fake_app import AppFakeGitHub
from tests.github.fake_github import REPO, Pull
from tests.github.payloads import pr_comment
from tests.service_env import PROFILE, evalbot, wait_for
from tests.sshd import SANDBOX_USER, ensure_sandbox_user, reachable_dir
from tests.stub_engine import make_repo

TOKEN = "ghs_" + "w" * 36
SIGTERM_AFTER_S, KILL_AFTER_S = 7.5, 2.5  # GitHub's runner, after its SIGINT


def sandbox_processes() -> list[int]:
    """The live processes of the sandbox user. A zombie is not one: it has exited, and an
    orphaned bwrap's waits for the machine's init to reap it (a second or two here), which a
    step that ends soon after its last run can beat."""
    uid = pwd.getpwnam(SANDBOX_USER).pw_uid
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid and \
                    Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[-1][:1] != "Z":
                found.append(int(pid))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def runner_cancels(proc: subprocess.Popen[bytes]) -> None:
    """What GitHub's runner does to a cancelled step's entry process."""
    proc.send_signal(signal.SIGINT)
    for sig, wait_s in ((signal.SIGTERM, SIGTERM_AFTER_S), (signal.SIGKILL, KILL_AFTER_S)):
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            proc.send_signal(sig)


@pytest.fixture
def root() -> Iterator[Path]:
    with reachable_dir("evalbot-cancel-") as path:
        yield path


def _config(root: Path, api_url: str, repo: Path, python: str) -> Path:
    import hashlib

    model = root / "model.bin"
    model.write_bytes(b"stub model weights")
    model.chmod(0o644)
    profile = root / "stub.yaml"
    profile.write_text(PROFILE.format(model=model, sha=hashlib.sha256(model.read_bytes())
                                      .hexdigest(), labels=""))
    workdir = root / "box"
    workdir.mkdir(mode=0o711)
    config = root / "evalbot.yaml"
    config.write_text(f"""profile: {profile}
store: {root / 'evalbot.sqlite3'}
github:
  repo: {REPO}
  api_url: {api_url}
  token_env: EVALBOT_GITHUB_TOKEN
{PACING}boxes:
  - name: local
    kind: local
    workdir: {workdir}
    repo: {repo}
    python: {python}
    trusted: true
    sandbox_user: {SANDBOX_USER}
    sandbox_launcher: []
""")
    return config


def test_a_cancelled_run_cancels_its_evaluation_and_kills_the_sandbox(
        root: Path, box_python: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    ensure_sandbox_user()
    repo, main, shas = make_repo(root / "src", {"hang": {"hang": True}})
    subprocess.run(["chmod", "-R", "a+rX", str(root / "src")], check=True)
    fake = AppFakeGitHub()
    try:
        fake.add_user("github-actions[bot]", "write", TOKEN)
        fake.add_user("maint", "write")
        fake.add_pull(Pull(7, shas["hang"], main, "alice"))
        run_id = fake.add_run("evalbot.yml")
        config = _config(root, fake.api_url, repo, box_python)
        store = Store(root / "evalbot.sqlite3")
        job = store.enqueue(REPO, 7, shas["hang"], "default")
        store.close()
        log = root / "worker.log"
        worker = evalbot("worker", "--config", str(config), "--until-idle", "--lease-ttl", "60",
                         "--on-signal", "cancel", "--run-url", fake.run_url(run_id),
                         "--no-throttle", env={"EVALBOT_GITHUB_TOKEN": TOKEN}, log=log)
        signalled: list[float] = []
        runner = threading.Thread(target=runner_cancels, args=(worker,), daemon=True)
        fake.on_cancel.append(lambda _id: (signalled.append(time.monotonic()), runner.start()))
        try:
            # The head's sample hangs in the sandbox; the PR's status links to this run.
            wait_for("the head hanging in the sandbox", sandbox_processes, 300, worker, log)
            linked = fake.state.statuses[shas["hang"]][-1]
            assert (linked["state"], linked["target_url"]) == ("pending", fake.run_url(run_id))
            event = root / "event.json"
            import json

            event.write_text(json.dumps(pr_comment(number=7, body="/evalbot cancel",
                                                   author="maint", pr_author="alice")))
            monkeypatch.setenv(run_cancel.TOKEN_ENV, TOKEN)
            assert run_cancel.main(["--event", str(event), "--repo", REPO,
                                    "--api-url", fake.api_url]) == 0
            assert signalled, "the run was not cancelled"
            wait_for("the step to end", lambda: worker.poll() is not None, 60)
            wait_for("no process of the sandbox user", lambda: not sandbox_processes(), 60)
            ended = time.monotonic() - signalled[0]
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        text = log.read_text()
        assert worker.returncode == 0, text[-3000:]  # it answered the signal, not killed
        store = Store(root / "evalbot.sqlite3")
        try:
            row = store.get(job.id)
        finally:
            store.close()
        assert (row.state, row.reason) == ("cancelled",
                                           "cancelled: its GitHub Actions run was cancelled")
        [comment] = fake.comments_on(7)
        assert "Cancelled: the evaluation's GitHub Actions run was cancelled" in comment["body"]
        assert fake.state.statuses[shas["hang"]][-1]["state"] == "error"
        assert fake.state.runs[run_id]["conclusion"] == "cancelled"
        print(f"signal to final state: {ended:.1f} s")  # the runner kills at 10 s
        assert fake.violations == []
    finally:
        fake.close()
