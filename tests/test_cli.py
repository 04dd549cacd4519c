"""The command line itself: a fast --help, --version, the lazy command table, and the rough
edges a first-time user meets (status without --store)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import click
import pytest

from evalbot.cli import COMMANDS, cli
from evalbot.store.jobs import Store

HEAVY = {"numpy", "scipy", "matplotlib", "paramiko", "github", "rich", "jinja2", "yaml",
         "torch", "waitress", "cryptography", "requests", "sqlite3"}


def _evalbot(*args: str, code: str = "") -> subprocess.CompletedProcess[str]:
    prelude = code + "import sys; sys.argv = ['evalbot', *sys.argv[1:]]; from evalbot.cli import main; main()"
    return subprocess.run([sys.executable, "-c", prelude, *args], capture_output=True, text=True,
                          timeout=300)


def test_help_loads_none_of_the_heavy_libraries() -> None:
    # What `python -X importtime` reports is every module the interpreter imported.
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "evalbot", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Commands:" in done.stdout
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "click" in imported  # the parse really saw the import log
    assert not {m.split(".")[0] for m in imported} & HEAVY


def test_help_lists_every_command_with_its_summary() -> None:
    done = _evalbot("--help")
    for name in [*COMMANDS, "demo", "eval", "grade", "status"]:
        assert f"  {name} " in done.stdout, name
    assert "Prometheus metrics" in done.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_lazy_table_matches_each_command(name: str) -> None:
    command = cli.get_command(click.Context(cli), name)
    assert command is not None and command.name == name
    assert command.get_short_help_str(limit=1000) == COMMANDS[name][1]


def test_version() -> None:
    done = _evalbot("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"evalbot, version {version('evalbot')}"


def test_status_reads_the_store_the_config_names(tmp_path: Path) -> None:
    Store(tmp_path / "jobs.sqlite3").close()
    config = tmp_path / "evalbot.yaml"
    config.write_text("profile: demo\nstore: jobs.sqlite3\n"
                      f"boxes:\n  - {{name: a, kind: local, workdir: {tmp_path / 'w'}}}\n")
    done = _evalbot("status", "--config", str(config), "--json")
    assert done.returncode == 0, done.stderr
    assert "queue" in json.loads(done.stdout)
    (tmp_path / "jobs.sqlite3").unlink()
    missing = _evalbot("status", "--config", str(config))
    assert missing.returncode == 1 and f"{tmp_path / 'jobs.sqlite3'}: no such store" in missing.stderr
    neither = _evalbot("status")
    assert neither.returncode == 1 and "--config" in neither.stderr
