"""The wheel installs one package, `evalbot`, holding the checkout's top-level engine/, remote/,
labels.yaml, templates/, keys/, example config and workflow templates file for file (through the
evalbot/ links to them). `.ci/wheel-check` installs it with its dependencies outside the
checkout and runs it; tests/test_setup_guide.py runs docs/setup.md with it."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from evalbot.config.settings import REPO_ROOT
from tests.wheel_build import build_wheel, tracked, wheel_venv

# The checkout's top-level files and folders the wheel carries inside evalbot/, where.
CARRIED = {"engine": "evalbot/engine", "remote": "evalbot/remote", "labels.yaml": "evalbot/labels.yaml",
           "templates": "evalbot/templates", "keys": "evalbot/keys",
           "evalbot.example.yaml": "evalbot/evalbot.example.yaml",
           ".github/workflows/evalbot.yml": "evalbot/workflows/evalbot.yml",
           ".github/workflows/evalbot-scheduled.yml": "evalbot/workflows/evalbot-scheduled.yml"}


def installed_name(rel: str) -> str | None:
    for top, inside in CARRIED.items():
        if rel == top or rel.startswith(top + "/"):
            return inside + rel[len(top):]
    return rel if rel.startswith("evalbot/") else None


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build for the module: its tests only read the wheel (a build is ~10 s of CPU)."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_carries_the_top_level_files_file_for_file(built: Path) -> None:
    wheel = zipfile.ZipFile(built)
    shipped = set(wheel.namelist())
    assert {name.split("/")[0] for name in shipped} == {"evalbot", "evalbot-0.1.0.dist-info"}
    expected = {rel: name for rel in tracked()
                if (name := installed_name(rel)) and not (REPO_ROOT / rel).is_symlink()}
    assert {"labels.yaml", "templates/comment.md.j2", "keys/README.md", "engine/corpus/prose.txt",
            ".github/workflows/evalbot.yml", "remote/box.py"} <= set(expected)
    assert sorted(set(expected.values()) - shipped) == []
    assert [rel for rel, name in expected.items()
            if wheel.read(name) != (REPO_ROOT / rel).read_bytes()] == []
    # Nothing reaches the wheel from outside what is tracked (a stray build, a cache).
    assert [n for n in shipped - set(expected.values())
            if not n.startswith("evalbot-0.1.0.dist-info/")] == []


def test_the_installed_bot_reads_the_wheel_not_the_checkout(built: Path, tmp_path: Path) -> None:
    venv = wheel_venv(built, tmp_path / "venv")
    probe = ("import evalbot, evalbot.engine, evalbot.remote, importlib.util\n"
             "from evalbot.config.resources import LABELS_FILE, TEMPLATES_DIR, KEYS_DIR\n"
             "from evalbot.evaluation.pipeline import HARNESS_SRC\n"
             "print(evalbot.__file__, evalbot.engine.__file__, evalbot.remote.__file__, LABELS_FILE,"
             " TEMPLATES_DIR, KEYS_DIR, HARNESS_SRC, importlib.util.find_spec('engine'),"
             " importlib.util.find_spec('remote'))\n")
    got = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    paths = got.stdout.split()
    assert paths[-2:] == ["None", "None"]  # no top-level engine or remote package is installed
    assert all(p.startswith(str(venv)) and str(REPO_ROOT) not in p for p in paths[:-2]), paths
