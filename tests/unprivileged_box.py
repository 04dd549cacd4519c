"""A box whose harness is not root, as `evalbot box init` makes one (docs/box.md): the bot logs in
over a real sshd as a harness user of the sandbox group, and the harness enters the sandbox
through the one sudo rule, a root-owned copy of the launcher. It may make no cgroup: its runs get
RLIMIT_DATA, sized tmpfs mounts and the disk watch, and no memory cgroup.

The sudo rule lives in a private copy of /etc/sudoers.d that only this sshd's mount namespace
sees (tests/test_setup_guide.py does the same for the guide's box init): nothing of it reaches
the machine or the suite's other workers.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from evalbot.engine.sandbox import session
from tests.sshd import SANDBOX_USER, Sshd, ensure_sandbox_user, per_worker

HARNESS_USER = per_worker("evalbot-harness")


@dataclass(frozen=True)
class Unprivileged:
    sshd: Sshd
    launcher: Path  # the root-owned copy the sudo rule allows
    home: Path


def _harness_user(home: Path) -> None:
    """The harness user: in the sandbox group (box init's), unlocked for a key login without
    PAM, trusting any repository's owner (the bot's demo repository is root's)."""
    group = pwd.getpwnam(SANDBOX_USER).pw_gid
    try:
        pwd.getpwnam(HARNESS_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", str(home),
                        "--shell", "/bin/sh", HARNESS_USER], check=True)
    subprocess.run(["usermod", "-p", "*", "-d", str(home), "-a", "-G", str(group),
                    HARNESS_USER], check=True)
    home.mkdir(mode=0o700, exist_ok=True)
    (home / ".gitconfig").write_text("[safe]\n\tdirectory = *\n")
    uid = pwd.getpwnam(HARNESS_USER).pw_uid
    for path in (home, home / ".gitconfig"):
        os.chown(path, uid, -1)


@pytest.fixture(scope="module")
def unprivileged() -> Iterator[Unprivileged]:
    ensure_sandbox_user()
    with tempfile.TemporaryDirectory(prefix="evalbot-unpriv-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        _harness_user(root / "home")
        launcher = root / "lib" / "sandbox-exec"
        launcher.parent.mkdir(mode=0o755)
        shutil.copyfile(session.EXEC, launcher)
        launcher.chmod(0o755)
        rules = root / "sudoers.d"
        shutil.copytree("/etc/sudoers.d", rules)
        (rules / "evalbot").write_text(f"{HARNESS_USER} ALL=(root) NOPASSWD: {launcher}\n")
        (rules / "evalbot").chmod(0o440)
        sshd = Sshd(root / "sshd", user=HARNESS_USER)
        (root / "sshd").chmod(0o755)  # the harness user reads its authorized keys there
        # sshd, and every harness it starts, in a mount namespace where sudoers.d is `rules`
        sshd.start(("unshare", "--mount", "--propagation", "private", "sh", "-c",
                    f'mount --bind {rules} /etc/sudoers.d && exec "$@"', "sh"))
        try:
            yield Unprivileged(sshd, launcher, root / "home")
        finally:
            sshd.stop()
