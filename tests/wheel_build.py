"""The wheel as a maintainer builds it, for the tests that check or run it: built from a copy of
the tracked files (symlinks kept, as git checks them out), and a venv with it installed whose
dependencies are this environment's (no network, seconds), evalbot itself only from the wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from evalbot.config.settings import REPO_ROOT


def tracked() -> list[str]:
    return subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files"], check=True,
                          capture_output=True, text=True).stdout.split()


def build_wheel(tmp: Path) -> Path:
    source = tmp / "src"
    for rel in tracked():
        src, dst = REPO_ROOT / rel, source / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        elif src.is_file():
            shutil.copy2(src, dst)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
                    str(tmp / "dist"), str(source)], check=True, capture_output=True, timeout=600)
    [wheel] = (tmp / "dist").glob("evalbot-*.whl")
    return wheel


def wheel_venv(wheel: Path, venv: Path) -> Path:
    """A venv with only the wheel installed in it; its other packages are found through a .pth
    line naming this environment's site-packages (a plain path: that directory's own .pth
    files, among them the checkout's editable install, are not run)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=300)
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path"
                                   "('purelib'))"], check=True, capture_output=True, text=True)
                   .stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True,
                   timeout=300)
    (purelib / "zz-test-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv
