"""The wheel holds everything the bot reads at run time: every tracked file of the evalbot,
engine and remote packages (the harness copied to a box, its corpus, the labels, templates and
keys). `.ci/wheel-check` then installs it outside the checkout and runs it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from evalbot.config.settings import REPO_ROOT


def test_the_wheel_ships_every_tracked_file_of_the_packages(tmp_path: Path) -> None:
    # Built from a copy of the tracked files: the wheel may rely on nothing untracked, and the
    # checkout's build/ is not shared with a concurrent build (.ci/wheel-check).
    source = tmp_path / "src"
    for rel in subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files"], check=True,
                              capture_output=True, text=True).stdout.split():
        if (REPO_ROOT / rel).is_file():
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / rel, source / rel)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
                    str(tmp_path / "dist"), str(source)], check=True, capture_output=True,
                   timeout=600)
    [wheel] = (tmp_path / "dist").glob("evalbot-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "evalbot", "engine",
                              "remote"], check=True, capture_output=True, text=True).stdout.split()
    assert "engine/corpus/prose.txt" in tracked and "evalbot/labels.yaml" in tracked
    assert sorted(set(tracked) - shipped) == []
    for name in ("evalbot/labels.yaml", "evalbot/templates/comment.md.j2", "engine/llamacpp/topk.cpp"):
        assert zipfile.ZipFile(wheel).read(name) == (REPO_ROOT / name).read_bytes()
