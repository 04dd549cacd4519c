"""docs/setup.md is followed word for word: every `sh` block runs, in order, in one bash session
and one empty directory, against the fake GitHub (a bot account's token) and a real sshd on
loopback; a block not run says why in its first line; every `evalbot` command any of its shell
blocks names exists; the example config documents every key the loader takes."""

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


NOT_RUN = re.compile(r"sh not run here: \S.{8,}")  # the reason is part of the mark


def _blocks() -> list[tuple[str, str]]:
    return [(m["info"].strip(), m["body"]) for m in BLOCK.finditer(GUIDE.read_text())]


def _script(swaps: dict[str, str]) -> tuple[str, list[str]]:
    """The guide's runnable blocks as one bash script, each announced by a marker line."""
    parts, run = ["set -euo pipefail"], []
    for info, body in _blocks():
        if info != "sh":
            continue
        for theirs, ours in swaps.items():
            body = body.replace(theirs, ours)
        parts += [f"echo '@@ block {len(run)}' >&2", body]
        run.append(body)
    return "\n".join(parts) + "\n", run


def test_every_shell_block_runs_or_says_why_not() -> None:
    infos = [info for info, _ in _blocks() if info.split(" ")[0] in ("sh", "bash", "shell", "")]
    unmarked = [i for i in infos if i not in ("sh",) and not NOT_RUN.fullmatch(i)]
    assert not unmarked, f"a shell block is `sh` (run) or `sh not run here: <why>`: {unmarked}"
    assert infos.count("sh") >= 8


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
    [install] = [body for info, body in _blocks() if NOT_RUN.fullmatch(info) and "pip wheel" in body]
    check = (REPO_ROOT / ".ci" / "wheel-check").read_text().replace("--quiet ", "")
    for step in ("pip wheel --no-deps --wheel-dir", "-m venv", "pip install", "bin/evalbot"):
        assert step in install and step in check, step


def test_the_guide_runs(tmp_path: Path, fake: AppFakeGitHub, sshd: Sshd) -> None:
    token = "github_pat_" + secrets.token_hex(12)
    fake.add_user("perf-bot", "write", token)
    # Section 1's venv: the install steps are .ci/wheel-check's (not run here); the venv they
    # make is this interpreter's, at the path the guide activates.
    home = tmp_path / "home"
    venv = home / ".local" / "share" / "evalbot" / "venv"
    venv.parent.mkdir(parents=True)
    venv.symlink_to(sys.prefix)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALBOT_", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), EVALBOT_GITHUB_TOKEN=token,  # Actions mode: no webhook secret
               PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                    if not p.startswith(sys.prefix)))  # only the guide's venv
    swaps = {"https://api.github.com": fake.api_url, "example-org/example-engine": REPO,
             "-p 22 gpu-a.internal.example": f"-p {sshd.port} 127.0.0.1"}
    script, run = _script(swaps)
    got = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True,
                         text=True, timeout=600)
    text = got.stdout + got.stderr
    if got.returncode != 0:
        failed = int(re.findall(r"^@@ block (\d+)$", got.stderr, re.M)[-1])
        pytest.fail(f"{GUIDE.name}: block {failed} failed (exit {got.returncode}):\n"
                    f"{run[failed]}\n{text[-4000:]}")
    assert "ok    github identity: perf-bot (read from the API)" in text
    assert "not used in actions mode" in text
    assert "ok    box local: model tiny sha256" in text and "[redacted]" not in text
    labels = {label.name for label in load_labels(LABELS_FILE).labels}
    assert labels and labels <= set(fake.state.repo_labels)  # labels sync created the label set
    assert (work / "signing.pem").stat().st_mode & 0o777 == 0o600
    assert "ok    signing key file" not in text or "Ed25519 key" in text
    assert "ED25519" in text or "ECDSA" in text or "RSA" in text  # the pinned key's fingerprint
    assert "stored " in text and "for box 'local', profile 'demo'" in text  # calibrate
    assert (work / "first-verdict" / "verdict.json").is_file()
    assert "improved" in (work / "first-verdict" / "verdict.json").read_text()
    assert token not in text


def test_the_example_config_names_every_key_the_loader_takes() -> None:
    from evalbot.config import settings

    example = (REPO_ROOT / "evalbot.example.yaml").read_text()
    keys = settings._TOP | settings._BOX | settings._GITHUB | settings._SERVICE
    missing = sorted(k for k in keys if not re.search(rf"^[\s#-]*{k}:", example, re.M))
    assert not missing, f"evalbot.example.yaml does not document: {missing}"
