"""docs/setup.md is checked: its `sh test` blocks run in order in one empty directory, against
the fake GitHub (a bot account's token) and a real sshd on loopback; every `evalbot` command
any of its shell blocks names exists."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from evalbot.cli import cli
from evalbot.config.resources import LABELS_FILE
from evalbot.config.settings import REPO_ROOT
from evalbot.grading.policy import load_labels
from tests.github.fake_app import AppFakeGitHub
from tests.github.fake_github import REPO
from tests.sshd import Sshd

GUIDE = REPO_ROOT / "docs" / "setup.md"
BLOCK = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^\s*```\s*$", re.S | re.M)
COMMAND = re.compile(r"(?:^|[\s/])evalbot[ \t]+(?!evalbot)(?P<name>[a-z][\w-]*)")


def _blocks() -> list[tuple[str, str]]:
    return [(m["info"].strip(), m["body"]) for m in BLOCK.finditer(GUIDE.read_text())]


@pytest.fixture
def fake() -> Iterator[AppFakeGitHub]:
    gh = AppFakeGitHub()
    yield gh
    gh.close()
    assert gh.violations == []


def test_every_evalbot_command_in_the_guide_exists() -> None:
    named = {m["name"] for info, body in _blocks() if info.startswith("sh")
             for m in COMMAND.finditer(body)}
    assert {"doctor", "labels", "keys", "calibrate", "status"} <= named
    assert named <= set(cli.list_commands(click.Context(cli))), named


def test_the_install_block_is_what_ci_runs() -> None:
    [install] = [body for info, body in _blocks() if info == "sh" and "pip wheel" in body]
    check = (REPO_ROOT / ".ci" / "wheel-check").read_text().replace("--quiet ", "")
    for step in ("pip wheel --no-deps --wheel-dir", "-m venv", "pip install", "bin/evalbot"):
        assert step in install and step in check, step


def test_the_guide_runs(tmp_path: Path, fake: AppFakeGitHub, sshd: Sshd) -> None:
    token = "github_pat_" + secrets.token_hex(12)
    fake.add_user("perf-bot", "write", token)
    env = {**os.environ, "EVALBOT_GITHUB_TOKEN": token,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("EVALBOT_WEBHOOK_SECRET", None)  # Actions mode: not needed
    swaps = {"https://api.github.com": fake.api_url, "example-org/example-engine": REPO,
             "-p 22 gpu-a.internal.example": f"-p {sshd.port} 127.0.0.1"}
    outputs = []
    for i, (info, body) in enumerate(_blocks()):
        if info != "sh test":
            continue
        for theirs, ours in swaps.items():
            body = body.replace(theirs, ours)
        got = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
        if got.returncode != 0:
            pytest.fail(f"block {i} of {GUIDE.name} failed (exit {got.returncode}):\n{body}\n"
                        f"{got.stdout}\n{got.stderr}")
        outputs.append(got.stdout + got.stderr)
    text = "\n".join(outputs)
    assert "ok    github identity: perf-bot (read from the API)" in text
    assert "not used in actions mode" in text
    labels = {label.name for label in load_labels(LABELS_FILE).labels}
    assert labels and labels <= set(fake.state.repo_labels)  # labels sync created the label set
    assert (tmp_path / "signing.pem").stat().st_mode & 0o777 == 0o600
    assert "ED25519" in text or "ECDSA" in text or "RSA" in text  # the pinned key's fingerprint
    assert token not in text
