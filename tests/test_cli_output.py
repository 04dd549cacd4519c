"""Tables on the command line without a terminal (a pipe, a file, CI's log): every cell whole,
never cut or folded at rich's assumed 80 columns; and `evalbot demo`'s short report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalbot.cli import _summary
from evalbot.cli_console import output_console
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
