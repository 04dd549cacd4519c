"""`evalbot box init`: set a new GPU box up once (run it on the box, as root). Idempotent.

What a box needs (docs/box.md): a harness user the bot logs in as (never root), a sandbox user
that PR code runs as, the harness user in the sandbox's group, a work directory the sandbox can
traverse but not list, the root-owned sandbox launcher and the one sudo rule that lets the
harness run it, and the tools the harness calls (python3 with numpy, git, flock, setsid, nohup,
timeout, sudo).
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import click

from engine.sandbox_exec import ALLOWED_USER_FILE

LAUNCHER = Path("/usr/local/lib/evalbot/sandbox-exec")
SUDOERS = Path("/etc/sudoers.d/evalbot")
TOOLS = ("git", "flock", "setsid", "nohup", "timeout", "sudo")


@dataclass(frozen=True)
class Plan:
    harness_user: str
    sandbox_user: str
    workdir: Path
    authorized_key: Path | None
    python: str


def ensure_user(name: str, home: str, shell: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--home-dir", home,
                        "--create-home" if home != "/nonexistent" else "--no-create-home",
                        "--shell", shell, name], check=True)
        return pwd.getpwnam(name)


def install_launcher(sandbox_user: str) -> None:
    """The root-owned copy the sudo rule names: the job directory's copy is never run as root."""
    source = Path(__file__).resolve().parent.parent / "engine" / "sandbox_exec.py"
    LAUNCHER.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(LAUNCHER.parent, 0o755)
    LAUNCHER.write_text(source.read_text())
    os.chown(LAUNCHER, 0, 0)
    os.chmod(LAUNCHER, 0o755)
    allowed = Path(ALLOWED_USER_FILE)
    allowed.parent.mkdir(parents=True, exist_ok=True)
    allowed.write_text(sandbox_user + "\n")
    os.chmod(allowed, 0o644)


def write_sudoers(harness_user: str) -> None:
    rule = f"{harness_user} ALL=(root) NOPASSWD: {LAUNCHER}\n"
    tmp = SUDOERS.with_name(".evalbot.tmp")
    SUDOERS.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(rule)
    os.chmod(tmp, 0o440)
    if shutil.which("visudo"):
        subprocess.run(["visudo", "-cqf", str(tmp)], check=True)
    tmp.replace(SUDOERS)


def make_dirs(plan: Plan, harness: pwd.struct_passwd) -> None:
    """workdir and jobs/: traversable by the sandbox, never listable; cache/: the harness's."""
    for path, mode in ((plan.workdir, 0o711), (plan.workdir / "jobs", 0o711),
                       (plan.workdir / "cache", 0o700)):
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, harness.pw_uid, harness.pw_gid)
        os.chmod(path, mode)


def authorize(key: Path, harness: pwd.struct_passwd) -> None:
    ssh = Path(harness.pw_dir) / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    keys = ssh / "authorized_keys"
    line = key.read_text().strip()
    if not line.startswith(("ssh-", "ecdsa-")) or "\n" in line:
        raise click.ClickException(f"{key}: not one OpenSSH public key line")
    present = keys.read_text().splitlines() if keys.is_file() else []
    if line not in present:
        keys.write_text("\n".join([*present, line]) + "\n")
    for path in (ssh, keys):
        os.chown(path, harness.pw_uid, harness.pw_gid)
    os.chmod(keys, 0o600)


def missing_tools(python: str) -> list[str]:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if subprocess.run([python, "-c", "import numpy"], capture_output=True).returncode != 0:
        missing.append(f"{python} with numpy")
    return missing


def init_box(plan: Plan) -> list[str]:
    """Apply the plan; returns what the box still lacks (tools the admin must install)."""
    if os.geteuid() != 0:
        raise click.ClickException("evalbot box init must run as root on the box")
    harness = ensure_user(plan.harness_user, f"/home/{plan.harness_user}", "/bin/bash")
    sandbox = ensure_user(plan.sandbox_user, "/nonexistent", "/usr/sbin/nologin")
    if harness.pw_uid == sandbox.pw_uid or 0 in (harness.pw_uid, sandbox.pw_uid):
        raise click.ClickException("the harness and sandbox users must be two non-root users")
    sandbox_group = grp.getgrgid(sandbox.pw_gid).gr_name
    subprocess.run(["usermod", "-a", "-G", sandbox_group, plan.harness_user], check=True)
    make_dirs(plan, harness)
    install_launcher(plan.sandbox_user)
    write_sudoers(plan.harness_user)
    if plan.authorized_key is not None:
        authorize(plan.authorized_key, harness)
    return missing_tools(plan.python)


@click.group("box")
def box_group() -> None:
    """Set up and inspect GPU boxes."""


@box_group.command("init")
@click.option("--workdir", type=click.Path(path_type=Path), default=Path("/srv/evalbot"),
              show_default=True, help="job directories and caches")
@click.option("--harness-user", default="evalbot", show_default=True,
              help="the user the bot logs in as and the harness runs as")
@click.option("--sandbox-user", default="evalbot-sandbox", show_default=True,
              help="the unprivileged user PR builds and runs execute as")
@click.option("--authorized-key", type=click.Path(exists=True, path_type=Path), default=None,
              help="the bot's public key, added to the harness user's authorized_keys")
@click.option("--python", default="/usr/bin/python3", show_default=True)
def init(workdir: Path, harness_user: str, sandbox_user: str, authorized_key: Path | None,
         python: str) -> None:
    """Create the users, directories, sandbox launcher and sudo rule of a new box."""
    missing = init_box(Plan(harness_user, sandbox_user, workdir.resolve(), authorized_key, python))
    click.echo(f"box ready: harness user {harness_user}, sandbox user {sandbox_user}, "
               f"workdir {workdir}, launcher {LAUNCHER}")
    for tool in missing:
        click.echo(f"missing on this box: {tool} (install it before the first evaluation)")
