"""The sandbox as the harness sees it: set up once per job, applied by engine.sandbox.proc to every run.

`enter` (called once by the harness) fetches the repository while the harness still has the
network, locks every other job directory away, makes the few directories the sandbox may write,
and activates the sandbox. From then on `proc.run` wraps each engine process with `wrap` and
calls `after_run` when it ends: every process of the sandbox user is killed, its HOME/TMPDIR
(made fresh for that one run) and whatever it left in the box's shared temporary directories are
removed, and the GPU must be idle before the next run. The privileged part lives in
sandbox_exec.py.
"""

from __future__ import annotations

import dataclasses
import grp
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.contract.integrity import verify_files
from engine.contract.sandbox_spec import STAGES
from engine.sandbox import safe_io, sandbox_exec

if TYPE_CHECKING:  # the type only: engine.contract.job imports sandbox_spec, never this module
    from engine.contract.job import Job

EXEC = Path(__file__).resolve().with_name("sandbox_exec.py")
WRITABLE = ("trees",)  # the only place of a job directory the sandbox writes by name
HOMES = "homes"  # harness-owned; one fresh HOME per run inside, removed after the run
# World-writable places outside the job directory: what the sandbox leaves there is removed
# after every run, so no file carries from one run to the next.
SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm")
DEFAULT_LIMITS = {"build": {"nproc": 4096, "fsize_mb": 8192, "nofile": 4096},
                  "run": {"nproc": 1024, "fsize_mb": 1024, "nofile": 4096}}


class SandboxError(RuntimeError):
    """The sandbox could not be set up or cleaned: the job is infrastructure's failure."""


@dataclass(frozen=True)
class Active:
    user: str
    hostname: str
    network: bool
    launcher: list[str]
    limits: dict[str, dict[str, int]]
    jobdir: Path
    gpu_idle_timeout_s: float
    mirror: Path | None = None
    gid: int = -1

    def stage(self, cwd: Path) -> str:
        """Checkout and build run in the trees; everything else is a run of built code."""
        trees = self.jobdir / "trees"
        return "build" if cwd == trees or trees in cwd.parents else "run"


_active: Active | None = None
_homes: Path | None = None  # where an unsandboxed harness makes its runs' private HOMEs


def active() -> Active | None:
    return _active


def enter(job: Job, jobdir: Path) -> Job:
    """Set the job's sandbox up; returns the job with its repository fetched to a local mirror.

    The models are checked against their pinned sha256 here, by the harness, before any PR code
    runs (IntegrityError: infra)."""
    global _active, _homes
    _homes = safe_io.harness_dir(jobdir.resolve() / HOMES)
    spec = getattr(job, "sandbox", None)
    if spec is None:
        _active = None
        return job
    limits = {stage: {**DEFAULT_LIMITS[stage], **(spec.get("limits") or {}).get(stage, {})}
              for stage in STAGES}
    act = Active(spec["user"], spec.get("hostname", "evalbot-sandbox"),
                 bool(spec.get("network", False)), list(spec.get("launcher", [])), limits,
                 jobdir.resolve(), float(spec.get("gpu_idle_timeout_s", 120)),
                 gid=_sandbox_gid(spec["user"]))
    _lock_down(jobdir.resolve(), act.gid, job.cache_dir)
    cache = Path(job.cache_dir) / "model-hashes.json" if job.cache_dir else None
    verify_files(((m.name, m.path, m.sha256) for m in job.models), cache)
    mirror = _fetch(job.repo, jobdir.resolve())
    _active = dataclasses.replace(act, mirror=mirror)
    kill_all()  # nothing of an earlier job may still run as the sandbox user
    return dataclasses.replace(job, repo=str(mirror)) if mirror else job


def _sandbox_gid(user: str) -> int:
    try:
        return pwd.getpwnam(user).pw_gid
    except KeyError as exc:
        raise SandboxError(f"sandbox user {user!r} does not exist on this box "
                           "(run `evalbot box init`)") from exc


def _lock_down(jobdir: Path, gid: int, cache_dir: str | None) -> None:
    """Other jobs become invisible; ours is traversable but not listable; three dirs writable."""
    jobs = jobdir.parent
    os.chmod(jobs, 0o711)
    for other in jobs.iterdir():
        if other != jobdir and other.is_dir() and other.stat().st_uid == os.getuid():
            os.chmod(other, 0o700)
    os.chmod(jobdir, 0o711)
    for name in WRITABLE:
        path = jobdir / name
        path.mkdir(exist_ok=True)
        try:
            os.chown(path, -1, gid)
        except PermissionError as exc:
            raise SandboxError(f"the harness user is not in the sandbox group "
                               f"{grp.getgrgid(gid).gr_name!r} (run `evalbot box init`)") from exc
        os.chmod(path, 0o2770)
    harness = jobdir / "harness"
    if harness.is_dir():  # our own code: readable, never writable, by the sandbox
        subprocess.run(["chmod", "-R", "a+rX,go-w", str(harness)], check=True)
    if cache_dir:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        os.chmod(cache_dir, 0o700)  # cached builds and reference logits stay the harness's


def _fetch(repo: str, jobdir: Path) -> Path | None:
    """Mirror the repository as the harness, with network; the sandbox then clones offline.

    A failed fetch leaves the job's repository as it was: the sandboxed checkout then fails and
    the harness reports a checkout failure, which is infrastructure's."""
    mirror = jobdir / "repo.git"
    log = jobdir / "logs" / "fetch.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as sink:
        done = subprocess.run(["git", "clone", "--quiet", "--mirror", "--no-hardlinks", repo,
                               str(mirror)], stdin=subprocess.DEVNULL, stdout=sink,
                              stderr=subprocess.STDOUT, timeout=1800, check=False)
    if done.returncode != 0:
        return None
    subprocess.run(["chmod", "-R", "a+rX,go-w", str(mirror)], check=True)
    return mirror


Preexec = Callable[[], None]


def wrap(argv: list[str], cwd: Path,
         env: dict[str, str]) -> tuple[list[str], dict[str, str], Preexec | None]:
    """argv, environment and child set-up that start `argv` inside the sandbox.

    A root harness confines the child itself between fork and exec (no launcher process); an
    unprivileged one goes through the root-owned launcher the sudo rule names."""
    act = _active
    if act is None:
        return argv, env, None
    spec: dict[str, object] = {
        "user": act.user, "hostname": act.hostname, "network": act.network,
        "limits": act.limits[act.stage(cwd.resolve())], "cwd": str(cwd),
        "env": {**env, **_git_trust(act.mirror)}}
    if not act.launcher and os.geteuid() == 0:
        return argv, sandbox_exec.environment(spec), lambda: sandbox_exec.confine(spec)
    launcher = act.launcher or [sys.executable, "-I", str(EXEC)]
    outer = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
    return [*launcher, "run", json.dumps(spec), "--", *argv], outer, None


def _git_trust(mirror: Path | None) -> dict[str, str]:
    """The mirror belongs to the harness user and git refuses another user's repository unless
    its global config trusts it; a command-line setting would not reach git's upload-pack."""
    if mirror is None:
        return {}
    config = mirror.with_name("sandbox.gitconfig")
    if not config.is_file():
        config.write_text(f"[safe]\n\tdirectory = {mirror}\n")
        os.chmod(config, 0o644)
    return {"GIT_CONFIG_GLOBAL": str(config), "GIT_CONFIG_NOSYSTEM": "1"}


def fresh_home(trusted: bool) -> Path:
    """A new, empty HOME/TMPDIR for one run: the sandbox group's for a sandboxed run, the
    harness's alone (0700) for a trusted one (reference, tokenizer) or on an unsandboxed box."""
    root = _active.jobdir / HOMES if _active is not None else _homes
    if root is None or not root.is_dir():  # outside a harness (tests, tools): the system's tmp
        return Path(tempfile.mkdtemp(prefix="evalbot-home-"))
    if _active is not None and not trusted:
        return safe_io.shared_dir(root, "home-", _active.gid)
    return safe_io.private_dir(root, "home-")


def output_dir(jobdir: Path, trusted: bool) -> Path:
    """A fresh directory for one run's output file, in `outputs/` (the harness's): writable by
    the sandbox group for a sandboxed run, by the harness alone for a trusted one."""
    root = safe_io.harness_dir(jobdir.resolve() / "outputs")
    if _active is not None and not trusted:
        return safe_io.shared_dir(root, "out-", _active.gid)
    return safe_io.private_dir(root, "out-")


def seal_trees() -> None:
    """After the builds: the trees are the harness's alone, so no run leaves state there for a
    later one (the artifacts were copied out and hashed)."""
    if _active is not None:
        os.chmod(_active.jobdir / "trees", 0o700)


def after_run(home: Path | None = None) -> None:
    """After every run: nothing of the sandbox user survives, nothing it wrote stays (its HOME,
    its files in the shared temporary directories), and the GPU is idle."""
    if _active is None:
        if home is not None:
            safe_io.remove_tree(home)
        return
    kill_all()
    _purge(home)
    kill_all()  # the purge itself ran as the sandbox user
    if home is not None:
        safe_io.remove_tree(home)
    _wait_gpu_idle(_active.gpu_idle_timeout_s)


def _purge(home: Path | None) -> None:
    """Delete, as the sandbox user (so only what it could delete itself), every file it owns
    in the shared temporary directories and everything in the run's HOME."""
    act = _active
    assert act is not None
    targets = [d for d in SHARED_TMP if os.path.isdir(d)]
    runs = [_purge_argv(targets, act.user)] if targets else []
    if home is not None:
        runs.append(["find", str(home), "-mindepth", "1", "-delete"])
    for command in runs:
        cmd, env, preexec = wrap(command, Path("/"), {"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
        subprocess.run(cmd, env=env, preexec_fn=preexec, cwd="/", stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=300, check=False)


def _purge_argv(targets: list[str], user: str) -> list[str]:
    """find | rm as the sandbox user: its files, in the directories where it could have made
    them. The walk does not descend into a directory the user neither owns nor may write (a
    checkout or venv someone left readable in /tmp: a walk of every such file after every run
    cost a second of system time each on a used box); it could only have written inside those
    through a world-writable directory another user nested there (docs/box.md). -prune and
    -delete do not mix (-delete implies -depth), hence rm."""
    find = ["find", *targets, "-xdev", "-mindepth", "1", "(", "-type", "d", "!", "-user", user,
            "!", "-writable", "-prune", ")", "-o", "-user", user, "-print0"]
    return ["/bin/sh", "-c", '"$@" | xargs -0 -r rm -rf --', "purge", *find]


def kill_all() -> None:
    act = _active
    if act is None:
        return
    if not act.launcher and os.geteuid() == 0:
        if sandbox_exec.kill_all(act.user) != 0:
            raise SandboxError(f"processes of {act.user} survive a SIGKILL")
        return
    launcher = act.launcher or [sys.executable, "-I", str(EXEC)]
    done = subprocess.run([*launcher, "kill", act.user], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise SandboxError(f"could not kill the sandbox's processes: {done.stderr.strip()}")


def _wait_gpu_idle(timeout_s: float) -> None:
    """No compute process may hold the GPU when the next sample starts (when nvidia-smi exists)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return
    deadline = time.monotonic() + timeout_s
    while True:
        done = subprocess.run([smi, "--query-compute-apps=pid", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=60, check=False)
        if done.returncode == 0 and not done.stdout.strip():
            return
        if time.monotonic() > deadline:
            raise SandboxError(f"the GPU is still busy {timeout_s:.0f} s after the sandbox ended")
        time.sleep(0.5)
