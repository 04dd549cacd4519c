"""`evalbot box init` on this machine as on a fresh box: real users, a real sshd with `UsePAM no`
(which refuses a locked account even with a valid key), the engine repository fetched by the
harness user. The launcher, the sudo rule and the allowed-user file go to a temporary directory
(this machine's own sandboxed tests use the system ones)."""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from evalbot.remote.ssh import SSHBox, SSHTarget
from evalbot.service import boxinit
from tests.sshd import Sshd
from tests.stub_engine import make_repo

HARNESS, SANDBOX = "evalbot-bi", "evalbot-bi-sbx"


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="evalbot-boxinit-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o711)
        monkeypatch.setattr(boxinit, "LAUNCHER", root / "lib" / "sandbox-exec")
        monkeypatch.setattr(boxinit, "SUDOERS", root / "sudoers.d" / "evalbot")
        monkeypatch.setattr(boxinit, "ALLOWED_USER_FILE", str(root / "etc" / "sandbox-user"))
        try:
            yield root
        finally:
            for user in (HARNESS, SANDBOX):
                subprocess.run(["userdel", "-r", user], capture_output=True, check=False)
                subprocess.run(["groupdel", user], capture_output=True, check=False)


def test_box_init_makes_a_box_the_bot_can_log_in_to_and_fetch_from(fresh: Path) -> None:
    repo, main, _ = make_repo(fresh / "src", {})
    sshd = Sshd(fresh / "sshd", user=HARNESS)
    plan = boxinit.Plan(HARNESS, SANDBOX, fresh / "srv", sshd.client_key.with_suffix(".pub"),
                        "/usr/bin/python3", repo=repo, install=False)
    boxinit.init_box(plan)
    boxinit.init_box(plan)  # idempotent
    harness, sandbox = pwd.getpwnam(HARNESS), pwd.getpwnam(SANDBOX)
    shadow = dict(line.split(":")[:2] for line in Path("/etc/shadow").read_text().splitlines())
    assert shadow[HARNESS] == "*"  # not locked: sshd without PAM lets it in
    assert HARNESS in grp.getgrgid(sandbox.pw_gid).gr_mem
    for path, mode in ((fresh / "srv", 0o711), (fresh / "srv" / "jobs", 0o711),
                       (fresh / "srv" / "cache", 0o700)):
        assert (path.stat().st_uid, path.stat().st_mode & 0o7777) == (harness.pw_uid, mode)
    assert all(p.stat().st_uid == harness.pw_uid for p in [repo, *repo.rglob("*")])
    launcher = boxinit.LAUNCHER
    assert (launcher.stat().st_uid, launcher.stat().st_mode & 0o777) == (0, 0o755)
    assert Path(boxinit.ALLOWED_USER_FILE).read_text() == f"{SANDBOX}\n"
    assert boxinit.SUDOERS.read_text() == f"{HARNESS} ALL=(root) NOPASSWD: {launcher}\n"
    keys = Path(harness.pw_dir) / ".ssh" / "authorized_keys"
    (sshd.root / "authorized_keys").write_text(keys.read_text())  # the key box init installed
    sshd.start()
    box = SSHBox("gpu1", str(fresh / "srv"), SSHTarget("127.0.0.1", sshd.port, HARNESS,
                                                      str(sshd.client_key), str(sshd.known_hosts)))
    try:
        box.connect()
        who = box.run(["id", "-un"], timeout_s=60)
        assert who.output.strip() == HARNESS
        clone = box.run(["git", "clone", "--quiet", "--mirror", str(repo),
                         str(fresh / "srv" / "jobs" / "mirror.git")], timeout_s=120)
        assert clone.returncode == 0, clone.output  # no "dubious ownership"
        head = box.run(["git", "-C", str(fresh / "srv" / "jobs" / "mirror.git"), "rev-parse",
                        "main"], timeout_s=60)
        assert head.output.strip() == main
    finally:
        box.close()
        sshd.stop()


def _shadow() -> dict[str, str]:
    return dict(line.split(":")[:2] for line in Path("/etc/shadow").read_text().splitlines())


def test_a_maintainers_own_account_keeps_its_password(fresh: Path) -> None:
    """A local box's harness user is the maintainer (docs/setup.md, section 3): box init must
    not replace their password with `*` as it unlocks a fresh, locked harness account."""
    boxinit.ensure_user(HARNESS, f"/home/{HARNESS}", "/bin/bash")
    hashed = "$6$evalbot$" + "x" * 86  # any crypt(3) hash: a password is set
    subprocess.run(["usermod", "-p", hashed, HARNESS], check=True)
    boxinit.init_box(boxinit.Plan(HARNESS, SANDBOX, fresh / "srv", None, "/usr/bin/python3",
                                  install=False))
    assert _shadow()[HARNESS] == hashed
    assert HARNESS in grp.getgrgid(pwd.getpwnam(SANDBOX).pw_gid).gr_mem


def test_a_root_harness_gets_no_group_and_no_login(fresh: Path) -> None:
    """A local box of a bot run as root (the guide, as CI follows it): the sandbox and the
    launcher as for any box, but root joins no group, keeps its password field, and box init
    never authorizes a key for it."""
    root_shadow = _shadow()["root"]
    key = Sshd(fresh / "sshd").client_key.with_suffix(".pub")
    with pytest.raises(click.ClickException, match="never logs in as root"):
        boxinit.init_box(boxinit.Plan("root", SANDBOX, fresh / "srv", key, "/usr/bin/python3",
                                      install=False))
    boxinit.init_box(boxinit.Plan("root", SANDBOX, fresh / "srv", None, "/usr/bin/python3",
                                  install=False))
    assert "root" not in grp.getgrgid(pwd.getpwnam(SANDBOX).pw_gid).gr_mem
    assert _shadow()["root"] == root_shadow
    assert (fresh / "srv").stat().st_uid == 0 and Path(boxinit.ALLOWED_USER_FILE).read_text() \
        == f"{SANDBOX}\n"


def _fake(path: Path, script: str) -> None:
    path.parent.mkdir(exist_ok=True)
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


@pytest.fixture
def apt_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An apt-get first on PATH that records its arguments, and a dpkg-query that knows no
    OpenBLAS (this machine's own stay untouched)."""
    log = tmp_path / "apt.log"
    _fake(tmp_path / "bin" / "apt-get", f'echo "$*" >> {log}\n')
    _fake(tmp_path / "bin" / "dpkg-query",
          f'[ "$3" = {boxinit.OPENBLAS} ] && exit 1\nexec /usr/bin/dpkg-query "$@"\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return log


def test_a_box_whose_numpy_lacks_openblas_gets_it(apt_log: Path) -> None:
    """Debian's python3-numpy alone runs the reference BLAS, on which the demo's `faster` PR
    gains too little for the guide's first verdict to decide: box init finds it missing, even
    where numpy is there, and installs it."""
    missing = boxinit.missing_tools(sys.executable)
    assert "numpy's fast BLAS: openblas" in missing
    boxinit.install_missing([*missing, "/usr/bin/python3 with numpy"])
    update, install = apt_log.read_text().splitlines()
    assert update == "update -q"
    assert {boxinit.OPENBLAS, "python3-numpy"} <= set(install.split())


def test_a_box_with_every_tool_asks_apt_for_nothing(apt_log: Path) -> None:
    boxinit.install_missing([])
    assert not apt_log.exists()
