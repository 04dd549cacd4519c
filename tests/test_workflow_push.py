"""A push to a PR under evaluation, with docs/setup.md's single self-hosted runner busy (7a).

The workflow's steps run as written (bash, the `evalbot` on the runner's PATH) against the fake
GitHub: the `opened` event's `intake` step queues the PR's head, its `work` step evaluates it on
a local box where the head hangs in the sandbox. Then the PR's head moves on GitHub; the push's
own `intake` cannot run (the runner is busy: GitHub holds it until `work` ends). The `work`
step's worker reads the PR at its next lease renewal (`--watch-pushes`), handles the new head as
`intake` would, and stops the old head's run: the old job superseded, the new head queued and
evaluated by the same `work` step. The push's `intake`, once the runner is free, finds the new
head's verdict there and queues nothing.

The 60 s of the contract are the renewal's period (the workflow's --lease-ttl 60 / 3: asserted
in tests/test_workflow.py) plus the handling: here, the first read of the PR that sees the new
head supersedes the job (counted on the fake's requests, not timed on this machine).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from evalbot.config.settings import REPO_ROOT
from evalbot.store.jobs import JobRow, Store
from tests.demo_box import box_python  # noqa: F401 (a fixture)
from tests.github.fake_app import AppFakeGitHub
from tests.github.fake_github import REPO, Hook, Pull
from tests.github.payloads import pull_request
from tests.service_env import wait_for
from tests.sshd import ensure_sandbox_user
from tests.stub_engine import make_repo
from tests.test_worker_cancel_signal import _config, root, sandbox_processes  # noqa: F401

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "evalbot.yml"
TOKEN = "ghs_" + "p" * 36  # the workflow's GITHUB_TOKEN
RUN_ID_ENV = "GITHUB_RUN_ID"


def _step(job: str, words: str) -> dict[str, Any]:
    """The step of the workflow's `job` whose command starts `words`."""
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"][job]["steps"]
    [step] = [s for s in steps if s["run"].lstrip().startswith(words)]
    return dict(step)


class Runner:
    """The self-hosted runner's side of a step: its env (the job's, with the config at this
    test's path and the token GitHub hands the job) and `evalbot` on its PATH."""

    def __init__(self, home: Path, config: Path, gh: AppFakeGitHub) -> None:
        self.root, self.gh = home, gh
        bin_dir = home / "runner-bin"
        bin_dir.mkdir()
        entry = bin_dir / "evalbot"  # what the venv step puts on GITHUB_PATH
        entry.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m evalbot "$@"\n')
        entry.chmod(0o755)
        self.env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                    "EVALBOT_CONFIG": str(config), "GITHUB_SERVER_URL": "https://github.com",
                    "GITHUB_REPOSITORY": REPO, "EVALBOT_GITHUB_TOKEN": TOKEN}

    def intake(self, event: dict[str, Any], name: str) -> str:
        path = self.root / f"{name}.json"
        path.write_text(json.dumps(event))
        env = {**self.env, "GITHUB_EVENT_NAME": "pull_request_target",
               "GITHUB_EVENT_PATH": str(path)}
        got = subprocess.run(["bash", "-e", "-c", _step("intake", "evalbot action")["run"]],
                             env=env, capture_output=True, text=True, timeout=300)
        assert got.returncode == 0, got.stdout + got.stderr
        return got.stdout

    def work(self, log: Path) -> subprocess.Popen[bytes]:
        run_id = self.gh.add_run("evalbot.yml")
        return subprocess.Popen(["bash", "-e", "-c", _step("work", "exec evalbot worker")["run"]],
                                env={**self.env, RUN_ID_ENV: str(run_id)},
                                stdout=open(log, "ab"), stderr=subprocess.STDOUT,  # noqa: SIM115
                                start_new_session=True)


def _jobs(path: Path) -> list[JobRow]:
    store = Store(path)
    try:
        return store.pr_jobs(REPO, 7)
    finally:
        store.close()


def test_a_push_supersedes_the_running_evaluation_while_intake_waits(
        root: Path, box_python: str) -> None:  # noqa: F811
    ensure_sandbox_user()
    repo, main, shas = make_repo(root / "src", {"hang": {"hang": True}, "same": {}})
    subprocess.run(["chmod", "-R", "a+rX", str(root / "src")], check=True)
    old, new = shas["hang"], shas["same"]
    fake = AppFakeGitHub()
    try:
        fake.add_user("github-actions[bot]", "write", TOKEN)
        fake.add_pull(Pull(7, old, main, "maint"))
        fake.add_user("maint", "write")
        config = _config(root, fake.api_url, repo, box_python)
        runner = Runner(root, config, fake)
        assert "queued job" in runner.intake(
            pull_request("opened", number=7, head_sha=old, base_sha=main, author="maint"),
            "opened")
        log = root / "work.log"
        work = runner.work(log)
        heads_read: list[str] = []  # the head each of the worker's reads of the PR found
        fake.before(Hook("pulls/get", lambda _body: heads_read.append(
            fake.state.pulls[7].head_sha), where="/pulls/7", times=10**6))
        try:
            wait_for("the old head hanging in the sandbox", sandbox_processes, 300, work, log)
            wait_for("the worker's first read of the PR", lambda: heads_read, 120, work, log)
            assert set(heads_read) == {old}  # the worker reads the PR at each renewal ...
            fake.state.pulls[7].head_sha = new  # ... and the PR's author pushes
            # (the push's `intake` waits for the runner: nothing else tells the store)
            wait_for("the old head's job superseded", lambda: any(
                j.head_sha == old and j.state == "superseded" for j in _jobs(root / "evalbot"
                                                                             ".sqlite3")),
                300, work, log)
            assert heads_read.count(new) == 1, heads_read  # the first read of it superseded
            wait_for("the work step to end (the new head evaluated)",
                     lambda: work.poll() is not None, 600)
        finally:
            if work.poll() is None:  # a failure: the step and what it started on the box
                os.killpg(work.pid, signal.SIGKILL)
                work.wait()
        text = log.read_text()
        assert work.returncode == 0, text[-3000:]
        [was, now] = _jobs(root / "evalbot.sqlite3")
        assert (was.head_sha, was.state, was.reason) == (old, "superseded",
                                                         f"superseded by {new[:10]}")
        assert (now.head_sha, now.state) == (new, "done"), now
        assert not sandbox_processes()
        assert fake.state.statuses[old][-1]["state"] == "error"  # the old head says superseded
        assert "newer push replaced it" in fake.state.statuses[old][-1]["description"]
        [comment] = fake.comments_on(7)
        assert new[:10] in comment["body"] and "Queued" not in comment["body"]
        # The runner is free: the push's `intake` runs now, and finds the head queued already.
        said = runner.intake(pull_request("synchronize", number=7, head_sha=new, base_sha=main,
                                          author="maint"), "synchronize")
        assert said.startswith("already done: job "), said
        assert len(_jobs(root / "evalbot.sqlite3")) == 2
        assert fake.violations == []
    finally:
        fake.close()
