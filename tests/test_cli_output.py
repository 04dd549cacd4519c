"""Tables on the command line without a terminal (a pipe, a file, CI's log): every cell whole,
never cut or folded at rich's assumed 80 columns; and `evalbot demo`'s short report."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from evalbot.cli import _summary, cli
from evalbot.cli_console import output_console
from evalbot.config.settings import REPO_ROOT
from evalbot.store.jobs import Store

LONG_REPO = "an-organisation-with-a-long-name/an-inference-engine-with-an-even-longer-name"


def test_status_into_a_pipe_keeps_every_cell_whole(tmp_path: Path) -> None:
    store = Store(tmp_path / "jobs.sqlite3")
    for pr in (1, 2):
        store.enqueue(LONG_REPO, pr, f"{pr}" * 40, "default", base_sha="b" * 40)
    store.close()
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run([sys.executable, "-m", "evalbot", "status", "--store",
                           str(tmp_path / "jobs.sqlite3")], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if LONG_REPO in line]
    assert len(rows) == 2  # each job on one line, its repo whole
    assert max(len(line) for line in rows) > 80
    assert "…" not in done.stdout


def test_the_verdict_summary_into_a_pipe_keeps_every_cell_whole(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The table `evalbot eval` and `evalbot demo` print, through the console they print it to."""
    labels = ["eval:XL", "eval:improved-decode", "eval:improved-prefill", "eval:witnessed",
              "eval:correctness-pass", "eval:a-label-long-enough-to-pass-eighty-columns"]
    verdict = {"headline": "eval:XL", "kind": "improved", "best_cell": "k",
               "cells": [{"key": "k", "metric": "decode", "ctx": 65536, "speedup": 0.761,
                          "lo": 0.019, "hi": 2.043}],
               "correctness": {"decision": "pass"}, "labels": labels}
    output_console().print(_summary([("0123456789", verdict)]))
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if "0123456789" in line]
    assert " ".join(labels) in row and "decode@64k +76.1% [+1.9, +204.3]" in row
    assert "…" not in out


def _commands(group: click.Group, ctx: click.Context) -> Iterator[tuple[str, click.Command]]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            for sub, inner in _commands(command, click.Context(command, parent=ctx)):
                yield f"{name} {sub}", inner
        else:
            yield name, command


def test_the_readme_names_every_command_with_json_output() -> None:
    """README's list of the commands with --json is the command line's own."""
    with_json = {name for name, command in _commands(cli, click.Context(cli))
                 if any("--json" in param.opts for param in command.params)}
    readme = (REPO_ROOT / "README.md").read_text()
    (sentence,) = [p for p in readme.split("\n\n") if p.startswith("Output for scripts: `--json`")]
    named = set(re.findall(r"`evalbot ([a-z -]+)`", sentence.split(";")[0]))
    assert named == with_json


@pytest.mark.parametrize(("words", "offered"), [
    ("evalbot da", "plain,dashboard"),  # a lazy command's name, not imported to list it
    ("evalbot verify --", "plain,--keys"),  # a lazy command's options
    ("evalbot status --", "plain,--json"),
])
def test_shell_completion_as_the_readme_sets_it_up(words: str, offered: str) -> None:
    env = {**os.environ, "_EVALBOT_COMPLETE": "bash_complete", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - 1)}
    done = subprocess.run([sys.executable, "-c", "import sys; sys.argv[0] = 'evalbot'; "
                           "from evalbot.cli import main; main()"], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert offered in done.stdout.splitlines()
    assert "_EVALBOT_COMPLETE=bash_source evalbot" in (REPO_ROOT / "README.md").read_text()
