"""docs/operations.md is checked: its `sh test` blocks run in order against a local demo set-up,
and every `evalbot` command any of its shell blocks names exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from evalbot.cli import cli
from evalbot.config.settings import REPO_ROOT

GUIDE = REPO_ROOT / "docs" / "operations.md"
BLOCK = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^\s*```\s*$", re.S | re.M)
COMMAND = re.compile(r"(?:^|[\s/])evalbot\s+(?P<name>[a-z][\w-]*)")


def _blocks() -> list[tuple[str, str]]:
    return [(m["info"].strip(), m["body"]) for m in BLOCK.finditer(GUIDE.read_text())]


def test_the_guide_has_tested_blocks() -> None:
    tested = [b for info, b in _blocks() if info == "sh test"]
    assert len(tested) >= 6  # set-up, store, status, shadow report, metrics, housekeep, backup


def test_every_evalbot_command_in_the_guide_exists() -> None:
    named = {m["name"] for info, body in _blocks() if info.startswith("sh")
             for m in COMMAND.finditer(body)}
    assert named, "no evalbot command found in the guide's shell blocks"
    known = set(cli.list_commands(click.Context(cli)))
    assert named <= known, sorted(named - known)


def test_the_guide_runs(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                                 f"{os.environ.get('PATH', '')}"}
    for i, (info, body) in enumerate(_blocks()):
        if info != "sh test":
            continue
        got = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
        if got.returncode != 0:
            pytest.fail(f"block {i} of {GUIDE.name} failed (exit {got.returncode}):\n{body}\n"
                        f"{got.stdout}\n{got.stderr}")
    assert (tmp_path / "evalbot.sqlite3").is_file()
    assert len(list((tmp_path / "backups").iterdir())) == 1
    assert (tmp_path / "box" / "tools" / "harness" / "engine").is_dir()
