"""What a user of the installed wheel meets on the command line: keys they can publish where
they can write, the dashboard without its extra, and a wheel with only `evalbot` at its top."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from setuptools import find_namespace_packages
from setuptools.config.pyprojecttoml import read_configuration

from evalbot.audit.signing import load_signing_key, sign_verdict
from evalbot.config.settings import REPO_ROOT
from tests.test_cli import _evalbot

# What an install without the `dashboard` extra has: no matplotlib. A None in sys.modules makes
# `import matplotlib` raise ModuleNotFoundError, the error evalbot/report/charts.py catches.
WITHOUT_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None; "
HINT = "pip install 'evalbot[dashboard]'"


def _cli(env_home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command line as a user with their own (empty) home and config folder runs it."""
    env = {**os.environ, "HOME": str(env_home), "XDG_CONFIG_HOME": str(env_home / ".config")}
    return subprocess.run([sys.executable, "-m", "evalbot", *args], capture_output=True,
                          text=True, timeout=120, env=env, cwd=env_home)


def test_keys_generate_names_a_folder_the_user_has_and_verify_reads_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    generated = _cli(home, "keys", "generate", "--out", str(tmp_path / "signing.pem"))
    assert generated.returncode == 0, generated.stderr
    assert "> keys/" not in generated.stderr  # no folder of a checkout the user may not have
    # Follow the printed instruction as written, in a shell, from the user's home.
    (command,) = [line.removeprefix("#   ") for line in generated.stderr.splitlines()
                  if line.startswith("#   mkdir -p ")]
    subprocess.run(["bash", "-c", command], cwd=home, check=True, timeout=30,
                   env={**os.environ, "HOME": str(home)})
    key_id = generated.stdout.split()[1]
    assert (home / ".config" / "evalbot" / "keys" / f"evalbot-{key_id}.pub").is_file()

    verdict = {"kind": "improved", "headline": "eval:M", "cells": []}
    signed = tmp_path / "verdict.json"
    signed.write_text(json.dumps(sign_verdict(verdict, load_signing_key(tmp_path / "signing.pem"))))
    ok = _cli(home, "verify", str(signed))  # no --keys: the user's folder is read
    assert ok.returncode == 0 and f"signed by key {key_id}" in ok.stdout, ok.stderr
    forged = tmp_path / "forged.json"
    forged.write_text(signed.read_text().replace('"eval:M"', '"eval:XL"'))
    bad = _cli(home, "verify", str(forged))
    assert bad.returncode == 1 and "bad signature" in bad.stderr


def test_verify_without_any_published_key_says_where_to_put_one(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "v.json").write_text("{}")
    done = _cli(home, "verify", str(tmp_path / "v.json"))
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert "no published public keys" in line and str(home / ".config/evalbot/keys") in line
    assert "--keys DIR" in line and "Traceback" not in done.stderr


def test_dashboard_help_works_without_the_extra_and_names_it() -> None:
    done = _evalbot("dashboard", "--help", code=WITHOUT_MATPLOTLIB)
    assert done.returncode == 0, done.stderr
    assert "Write the static dashboard" in done.stdout and HINT in done.stdout


def test_dashboard_run_without_the_extra_fails_in_one_line(tmp_path: Path) -> None:
    done = _evalbot("dashboard", "--out", str(tmp_path / "site"), code=WITHOUT_MATPLOTLIB)
    assert done.returncode == 1 and done.stderr.startswith("error: ") and HINT in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "site").exists()


def test_the_demos_dashboard_hint_prints_the_extra_whole(tmp_path: Path) -> None:
    """rich takes `[dashboard]` for markup unless it is escaped: the hint then read
    `pip install 'evalbot'`, which installs no matplotlib."""
    probe = (WITHOUT_MATPLOTLIB +
             "from pathlib import Path\n"
             "from rich.console import Console\n"
             "from evalbot.evaluation.demo import dashboard_missing, demo_links, write_dashboard\n"
             "missing = dashboard_missing()\n"
             "console = Console(record=True, width=200)\n"
             f"write_dashboard(None, Path({str(tmp_path / 'site')!r}), console, missing)\n"
             "links = demo_links(Path('/x/engine-repo'), with_dashboard=not missing)\n"
             "print(repr(console.export_text()), repr(links.dashboard_url))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert HINT in done.stdout and "''" in done.stdout  # no dashboard link in the comments
    assert not (tmp_path / "site").exists()


def test_with_the_extra_the_demo_links_its_dashboard() -> None:
    from evalbot.evaluation.demo import dashboard_missing, demo_links

    assert dashboard_missing() == ""
    assert demo_links(Path("/x"), with_dashboard=True).dashboard_url == "../dashboard"
    Console()  # rich is a core dependency: the demo prints with it


@pytest.mark.filterwarnings("ignore:Support for `\\[tool.setuptools\\]`")
def test_only_evalbot_is_a_top_level_package_beside_a_demo_output(tmp_path: Path) -> None:
    """`./dev demo` leaves evalbot-demo/ (and its generated engine) in the checkout; pyproject's
    package search, as setuptools runs it, must not ship it as a top-level package."""
    config = read_configuration(REPO_ROOT / "pyproject.toml", expand=False)
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    for folder in ("evalbot/report", "evalbot-demo/engine/engine-repo", "evalbot-out", "tests"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    found = find_namespace_packages(str(tmp_path), include=include)
    assert sorted(found) == ["evalbot", "evalbot.report"]


def test_the_demo_replaces_only_its_own_engine_folder(tmp_path: Path) -> None:
    """`evalbot demo --out DIR` keeps its generated engine in DIR/demo-engine/ (Reproduce names
    it): an earlier demo's is replaced, a folder of the user's by that name is never deleted."""
    from evalbot.config.errors import EvalbotError
    from evalbot.engine.demo import generate
    from evalbot.evaluation.demo import ENGINE_DIR, fresh_engine_dir

    earlier = generate(tmp_path / ENGINE_DIR)
    assert fresh_engine_dir(tmp_path / ENGINE_DIR) == tmp_path / ENGINE_DIR
    assert not earlier.path.exists()
    mine = tmp_path / "other" / ENGINE_DIR
    (mine / "engine-repo").mkdir(parents=True)
    (mine / "notes.txt").write_text("the user's")
    with pytest.raises(EvalbotError, match="not an earlier demo's engine .*; choose another --out"):
        fresh_engine_dir(mine)
    assert (mine / "notes.txt").read_text() == "the user's"
