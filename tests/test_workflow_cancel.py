"""`/evalbot cancel` with the single self-hosted runner busy evaluating (docs/setup.md, 7a).

The workflow's `cancel` job, run as its steps are written (bash, the system's python3 with
nothing installed, the wheel fetched by URL and checked by digest), against the fake GitHub:
it cancels the run evaluating the PR the comment is on, and nothing for a commenter who may
not. The worker's side (the signals GitHub sends) is tests/test_worker_cancel_signal.py."""

from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalbot.config.settings import REPO_ROOT
from tests.github.fake_github import REPO, FakeGitHub, Pull
from tests.github.payloads import pr_comment

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "evalbot.yml"
BOT_TOKEN = "ghs_" + "c" * 36  # the hosted job's GITHUB_TOKEN
SYSTEM_PYTHON = "/usr/bin/python3"  # a Python with nothing of evalbot's dependencies


def cancel_job() -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())["jobs"]["cancel"]
    return job


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The package as the wheel lays it out (a zip with `evalbot/` at its root), and its sha256."""
    path = tmp_path_factory.mktemp("wheel") / "evalbot-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for source in sorted((REPO_ROOT / "evalbot").rglob("*.py")):
            z.write(source, source.relative_to(REPO_ROOT).as_posix())
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    gh = FakeGitHub()
    gh.add_user("github-actions[bot]", "write", BOT_TOKEN)
    for login, permission in (("maint", "write"), ("alice", "read"), ("mallory", "read")):
        gh.add_user(login, permission)
    yield gh
    gh.close()
    assert gh.violations == []


def _evaluating(gh: FakeGitHub, number: int, head: str, author: str = "alice") -> int:
    """A PR whose evaluation holds a run: the worker's pending status links to it."""
    gh.add_pull(Pull(number, head, "b" * 40, author))
    run_id = gh.add_run("evalbot.yml")
    gh.state.statuses.setdefault(head, []).append(
        {"state": "pending", "description": "evaluating on box gpu-a", "context": "evalbot",
         "creator": "github-actions[bot]", "target_url": gh.run_url(run_id)})
    return run_id


def run_cancel_job(tmp: Path, gh: FakeGitHub, wheel: tuple[Path, str], number: int,
                   author: str, pr_author: str = "alice", body: str = "/evalbot cancel",
                   wheel_url: str | None = None) -> subprocess.CompletedProcess[str]:
    """The `cancel` job's steps, in order, as the hosted runner runs each (`bash -e`)."""
    event = tmp / "event.json"
    event.write_text(json.dumps(pr_comment(number=number, body=body, author=author,
                                           pr_author=pr_author)))
    job = cancel_job()
    env = {"PATH": f"{tmp / 'bin'}:/usr/bin:/bin", "RUNNER_TEMP": str(tmp),
           "GITHUB_EVENT_PATH": str(event), "GITHUB_REPOSITORY": REPO,
           "GITHUB_API_URL": gh.api_url,
           "EVALBOT_WHEEL_URL": wheel[0].as_uri() if wheel_url is None else wheel_url,
           "EVALBOT_WHEEL_SHA256": wheel[1]}
    (tmp / "bin").mkdir(exist_ok=True)
    python = tmp / "bin" / "python3"
    if not python.exists():
        python.symlink_to(SYSTEM_PYTHON)  # ubuntu-latest's python3: no PyGithub, no click
    out = ""
    for step in job["steps"]:
        step_env = {**env, **{k: (BOT_TOKEN if "secrets.GITHUB_TOKEN" in v else v)
                              for k, v in step.get("env", {}).items()}}
        got = subprocess.run(["bash", "-e", "-c", step["run"]], env=step_env, text=True,
                             capture_output=True, timeout=120)
        out += got.stdout + got.stderr
        if got.returncode != 0:
            return subprocess.CompletedProcess(step["run"], got.returncode, out, "")
    return subprocess.CompletedProcess("cancel", 0, out, "")


def test_the_hosted_job_installs_nothing_and_holds_only_its_token() -> None:
    job = cancel_job()
    assert job["runs-on"] == "ubuntu-latest" and "needs" not in job
    assert job["permissions"] == {"actions": "write", "pull-requests": "read",
                                  "statuses": "read"}
    assert "environment" not in job  # no secret of the bot's environment reaches it
    assert not any("pip" in step["run"] for step in job["steps"])
    assert "sha256sum --check" in job["steps"][0]["run"]


def test_a_writers_cancel_cancels_the_run_evaluating_that_pr(
        tmp_path: Path, fake: FakeGitHub, wheel: tuple[Path, str]) -> None:
    ours = _evaluating(fake, 7, "1" * 40)
    other = _evaluating(fake, 8, "2" * 40)
    got = run_cancel_job(tmp_path, fake, wheel, 7, author="maint")
    assert got.returncode == 0, got.stdout
    assert f"cancelled run {ours} for maint" in got.stdout
    assert fake.state.runs[ours]["conclusion"] == "cancelled"
    assert fake.state.runs[other]["status"] == "in_progress"  # another PR's evaluation goes on
    assert fake.calls("actions/cancel-workflow-run") == 1


def test_the_pr_author_may_cancel_their_own(tmp_path: Path, fake: FakeGitHub,
                                            wheel: tuple[Path, str]) -> None:
    run_id = _evaluating(fake, 7, "1" * 40, author="alice")
    got = run_cancel_job(tmp_path, fake, wheel, 7, author="alice", pr_author="alice")
    assert got.returncode == 0 and fake.state.runs[run_id]["conclusion"] == "cancelled"


def test_an_unauthorised_commenter_cancels_nothing(tmp_path: Path, fake: FakeGitHub,
                                                   wheel: tuple[Path, str]) -> None:
    run_id = _evaluating(fake, 7, "1" * 40, author="alice")
    got = run_cancel_job(tmp_path, fake, wheel, 7, author="mallory", pr_author="alice")
    assert got.returncode == 0, got.stdout
    assert "refused: mallory may not cancel PR #7" in got.stdout
    assert fake.state.runs[run_id]["status"] == "in_progress"
    assert fake.calls("actions/cancel-workflow-run") == 0
    assert fake.calls("actions/get-workflow-run") == 0  # refused before anything is looked up


@pytest.mark.parametrize("body", ["> /evalbot cancel", "`/evalbot cancel`",
                                  "/evalbot cancel\n/evalbot rerun"])
def test_a_quoted_or_mixed_cancel_is_no_cancel(tmp_path: Path, fake: FakeGitHub,
                                               wheel: tuple[Path, str], body: str) -> None:
    run_id = _evaluating(fake, 7, "1" * 40)
    got = run_cancel_job(tmp_path, fake, wheel, 7, author="maint", body=body)
    assert got.returncode == 0 and "nothing to do" in got.stdout
    assert fake.state.runs[run_id]["status"] == "in_progress"


def test_only_a_going_run_of_the_evaluation_workflow_is_cancelled(
        tmp_path: Path, fake: FakeGitHub, wheel: tuple[Path, str]) -> None:
    run_id = _evaluating(fake, 7, "1" * 40)
    fake.state.runs[run_id]["path"] = ".github/workflows/deploy.yml"  # a status someone forged
    got = run_cancel_job(tmp_path, fake, wheel, 7, author="maint")
    assert "is not one of evalbot.yml's; not cancelled" in got.stdout
    assert fake.state.runs[run_id]["status"] == "in_progress"
    fake.state.runs[run_id].update(path=".github/workflows/evalbot.yml", status="completed",
                                   conclusion="success")
    got = run_cancel_job(tmp_path, fake, wheel, 7, author="maint")
    assert f"run {run_id} already success" in got.stdout
    assert fake.calls("actions/cancel-workflow-run") == 0


def test_a_pr_with_no_running_evaluation_leaves_the_cancel_to_the_intake(
        tmp_path: Path, fake: FakeGitHub, wheel: tuple[Path, str]) -> None:
    fake.add_pull(Pull(7, "1" * 40, "b" * 40, "alice"))
    fake.state.statuses["1" * 40] = [{"state": "pending", "description": "queued",
                                      "context": "evalbot", "creator": "x", "target_url": ""}]
    got = run_cancel_job(tmp_path, fake, wheel, 7, author="maint")
    assert got.returncode == 0 and "no evaluation running" in got.stdout


def test_a_wheel_that_is_not_the_pinned_one_is_not_run(tmp_path: Path, fake: FakeGitHub,
                                                       wheel: tuple[Path, str]) -> None:
    run_id = _evaluating(fake, 7, "1" * 40)
    got = run_cancel_job(tmp_path, fake, wheel=(wheel[0], "0" * 64), number=7, author="maint")
    assert got.returncode != 0 and "FAILED" in got.stdout
    assert fake.state.runs[run_id]["status"] == "in_progress"


def test_an_unset_wheel_url_fails_with_the_hint_to_set_it(tmp_path: Path, fake: FakeGitHub,
                                                          wheel: tuple[Path, str]) -> None:
    """The repository variable unset (`${{ vars.X }}` is then empty): the job says which
    variables to set and where, instead of curl's "no URL specified"."""
    run_id = _evaluating(fake, 7, "1" * 40)
    got = run_cancel_job(tmp_path, fake, wheel, 7, author="maint", wheel_url="")
    assert got.returncode != 0
    assert "::error::" in got.stdout and "EVALBOT_WHEEL_URL" in got.stdout
    assert "docs/setup.md section 7a" in got.stdout
    assert "curl" not in got.stdout
    assert fake.state.runs[run_id]["status"] == "in_progress"
