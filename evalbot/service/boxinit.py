"""`evalbot box init`: set a new GPU box up once (run it on the box, as root). Idempotent.

What a box needs (docs/box.md): a harness user the bot logs in as (never root), a sandbox user
that PR code runs as, the harness user in the sandbox's group, a work directory the sandbox can
traverse but not list, the root-owned sandbox launcher and the one sudo rule that lets the
harness run it, and the tools the harness calls (python3 with numpy, git, flock, setsid, nohup,
timeout, sudo). On a Debian or Ubuntu box the missing tools are installed with apt-get, so a fresh
box needs no manual step.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from evalbot.config.errors import EvalbotError
from evalbot.engine.sandbox import sandbox_exec
from evalbot.engine.sandbox.sandbox_exec import ALLOWED_USER_FILE

LAUNCHER = Path("/usr/local/lib/evalbot/sandbox-exec")
SUDOERS = Path("/etc/sudoers.d/evalbot")
TOOLS = ("git", "flock", "setsid", "nohup", "timeout", "sudo", "bwrap")
# Debian's python3-numpy alone (no recommends) runs the reference BLAS, whose matmuls are several
# times slower: the demo's `faster` PR then gains +25-48% instead of +50-160%, too close to the
# demo profile's 30% thresholds for the guide's first verdict to decide.
OPENBLAS = "libopenblas0-pthread"
DEBIAN_PACKAGES = {"git": "git", "flock": "util-linux", "setsid": "util-linux",
                   "nohup": "coreutils", "timeout": "coreutils", "sudo": "sudo",
                   "bwrap": "bubblewrap", "numpy": "python3-numpy", "openblas": OPENBLAS}


@dataclass(frozen=True)
class Plan:
    harness_user: str
    sandbox_user: str
    workdir: Path
    authorized_key: Path | None
    python: str
    repo: Path | None = None  # the engine repository on the box, when it is a local path
    install: bool = True  # apt-get what is missing (Debian/Ubuntu)


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
    source = Path(sandbox_exec.__file__)  # the installed harness's, wheel or checkout
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


LOCKED_EMPTY = ("!", "!!", "!*")  # what useradd leaves: locked, and no password behind the lock


def unlock_login(user: str) -> None:
    """useradd leaves the password field `!` (locked); sshd with `UsePAM no` then refuses even
    key logins. `*` is no password at all, and not locked. An account with a password (a
    maintainer's own, as the harness user of a local box) is left as it is."""
    fields = {line.split(":")[0]: line.split(":")[1] for line in
              Path("/etc/shadow").read_text().splitlines() if line.count(":") >= 2}
    if fields.get(user) in LOCKED_EMPTY:
        subprocess.run(["usermod", "-p", "*", user], check=True)


def own_repo(repo: Path, harness: pwd.struct_passwd) -> None:
    """git refuses a repository another user owns (safe.directory): the harness fetches from
    it, so it must be the harness user's."""
    subprocess.run(["chown", "-R", "--no-dereference", f"{harness.pw_uid}:{harness.pw_gid}",
                    str(repo)], check=True)


def install_missing(missing: list[str]) -> None:
    """apt-get the Debian packages of the missing tools (nothing without apt-get)."""
    apt = shutil.which("apt-get")
    wanted = sorted({DEBIAN_PACKAGES[m.split()[-1]] for m in missing
                     if m.split()[-1] in DEBIAN_PACKAGES})
    if apt is None or not wanted:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        subprocess.run([apt, "update", "-q"], check=True, env=env)
        subprocess.run([apt, "install", "-y", "-q", "--no-install-recommends", *wanted],
                       check=True, env=env)
    except subprocess.CalledProcessError as exc:  # e.g. a box without a package mirror
        raise EvalbotError(f"box init: apt-get could not install {', '.join(wanted)} (exit "
                           f"{exc.returncode}); install them by hand, or pass --no-install "
                           "where the harness runs as root and needs no sudo") from exc


def missing_tools(python: str) -> list[str]:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if subprocess.run([python, "-c", "import numpy"], capture_output=True).returncode != 0:
        missing.append(f"{python} with numpy")
    if shutil.which("dpkg-query") and not debian_installed(OPENBLAS):
        missing.append("numpy's fast BLAS: openblas")
    return missing


def debian_installed(package: str) -> bool:
    done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True,
                          text=True, check=False)
    return done.returncode == 0 and done.stdout.endswith("ok installed")


def check_sandbox(sandbox_user: str) -> str | None:
    """Start a command in the sandbox as the installed launcher does; None when it works, else
    the launcher's one line on why not (what to change on the box)."""
    done = subprocess.run([sys.executable, "-I", str(LAUNCHER), "check", sandbox_user],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                          check=False)
    if done.returncode == 0:
        return None
    return (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()[-1]


def init_box(plan: Plan) -> list[str]:
    """Apply the plan; returns what the box still lacks (tools the admin must install)."""
    if os.geteuid() != 0:
        raise click.ClickException("evalbot box init must run as root on the box")
    if plan.install and missing_tools(plan.python):
        install_missing(missing_tools(plan.python))  # sudo first: the rule below needs it
    harness = ensure_user(plan.harness_user, f"/home/{plan.harness_user}", "/bin/bash")
    sandbox = ensure_user(plan.sandbox_user, "/nonexistent", "/usr/sbin/nologin")
    if harness.pw_uid == sandbox.pw_uid or sandbox.pw_uid == 0:
        raise click.ClickException("the sandbox user must be a non-root user other than the "
                                   "harness user")
    if harness.pw_uid == 0 and plan.authorized_key is not None:
        raise click.ClickException("the bot never logs in as root: name a harness user of its "
                                   "own (--harness-user) for --authorized-key")
    if harness.pw_uid != 0:  # a root harness (a local box of a bot run as root) needs neither
        sandbox_group = grp.getgrgid(sandbox.pw_gid).gr_name
        subprocess.run(["usermod", "-a", "-G", sandbox_group, plan.harness_user], check=True)
        unlock_login(plan.harness_user)
    make_dirs(plan, harness)
    if plan.repo is not None:
        own_repo(plan.repo, harness)
    install_launcher(plan.sandbox_user)
    write_sudoers(plan.harness_user)
    if plan.authorized_key is not None:
        authorize(plan.authorized_key, harness)
    missing = missing_tools(plan.python)
    if shutil.which("bwrap") is not None:
        why = check_sandbox(plan.sandbox_user)
        if why is not None:
            raise EvalbotError(f"box init: the sandbox does not work on this box: {why}")
    return missing


@click.group("box")
def box_group() -> None:
    """Set up and inspect GPU boxes."""


@box_group.command("init")
@click.option("--workdir", type=click.Path(path_type=Path), default=Path("/srv/evalbot"),
              show_default=True, help="job directories and caches")
@click.option("--harness-user", default="evalbot", show_default=True,
              help="the user the bot logs in as and the harness runs as (a local box: the "
              "user evalbot runs as)")
@click.option("--sandbox-user", default="evalbot-sandbox", show_default=True,
              help="the unprivileged user PR builds and runs execute as")
@click.option("--authorized-key", type=click.Path(exists=True, path_type=Path), default=None,
              help="the bot's public key, added to the harness user's authorized_keys")
@click.option("--python", default="/usr/bin/python3", show_default=True)
@click.option("--repo", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="the engine repository on this box (made the harness user's)")
@click.option("--no-install", is_flag=True, help="do not apt-get missing tools")
def init(workdir: Path, harness_user: str, sandbox_user: str, authorized_key: Path | None,
         python: str, repo: Path | None, no_install: bool) -> None:
    """Create the users, directories, sandbox launcher and sudo rule of a new box."""
    missing = init_box(Plan(harness_user, sandbox_user, workdir.resolve(), authorized_key, python,
                            repo.resolve() if repo else None, not no_install))
    click.echo(f"box ready: harness user {harness_user}, sandbox user {sandbox_user}, "
               f"workdir {workdir}, launcher {LAUNCHER}")
    for tool in missing:
        click.echo(f"missing on this box: {tool} (install it before the first evaluation)")
