"""The sandbox as the harness sees it: set up once per job, applied by engine.sandbox.proc to every run.

`enter` (called once by the harness) fetches the repository while the harness still has the
network, locks every other job directory away, makes the few directories the sandbox may write,
checks that bubblewrap works on this box (infrastructure's failure where it does not), and
activates the sandbox. From then on `proc.run` wraps each engine process with `wrap`: the
launcher (sandbox_exec.py, which says what a run sees) becomes the sandbox user and starts it in
bubblewrap, with `/` read-only and writable only what is the run's own (`_paths`): its HOME, a
tmpfs made for it, the output directories its argv names, and in a build stage its own tree.
When the run ends `after_run` kills every process of the sandbox user and the GPU must be idle
before the next run. The private /tmp, /var/tmp, /dev/shm and /run/lock of a run, and its HOME,
end with its mount namespace: there is nothing to purge.
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

from ..contract.integrity import verify_files
from ..contract.sandbox_spec import RLIMIT_KEYS, STAGES
from . import caps as caps_of
from . import memory_cap, safe_io, sandbox_exec

if TYPE_CHECKING:  # the type only: engine.contract.job imports sandbox_spec, never this module
    from ..contract.job import Job

EXEC = Path(__file__).resolve().with_name("sandbox_exec.py")
WRITABLE = ("trees",)  # the only place of a job directory the sandbox writes by name
HOMES = "homes"  # harness-owned; one fresh HOME per run inside, removed after the run
# The harness's own records in the job directory, none of a run's business: the logs (main's
# samples print its greedy tokens, which a head could copy), the job (the box's repository URL,
# credentials included) and what the bot follows. The harness's alone (0700/0600).
LOGS = "logs"
RECORDS = ("job.json", "harness.log", "harness.pid", "status.json", "results.json")
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
    visible: tuple[str, ...] = ()  # read-only in every run: the job directory, Python, models

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
    limits = {stage: {**caps_of.default_limits(), **DEFAULT_LIMITS[stage],
                      **getattr(job, "limits", {}).get(stage, {}),
                      **(spec.get("limits") or {}).get(stage, {})} for stage in STAGES}
    act = Active(spec["user"], spec.get("hostname", "evalbot-sandbox"),
                 bool(spec.get("network", False)), list(spec.get("launcher", [])), limits,
                 jobdir.resolve(), float(spec.get("gpu_idle_timeout_s", 120)),
                 gid=_sandbox_gid(spec["user"]))
    _lock_down(jobdir.resolve(), act.gid, job.cache_dir)
    act = dataclasses.replace(act, visible=_visible(jobdir.resolve(), job))
    _check_works(act)
    cache = Path(job.cache_dir) / "model-hashes.json" if job.cache_dir else None
    verify_files(((m.name, m.path, m.sha256) for m in job.models), cache)
    mirror = _fetch(job.repo, jobdir.resolve())
    _active = dataclasses.replace(act, mirror=mirror)
    kill_all()  # nothing of an earlier job may still run as the sandbox user
    return dataclasses.replace(job, repo=str(mirror)) if mirror else job


def _visible(jobdir: Path, job: Job) -> tuple[str, ...]:
    """What a run reads of the box besides `/`'s system files, bound back read-only where the
    sandbox hides the rest (a box's work directory may lie under /srv, /home or /tmp): the job
    directory (file permissions still keep the harness's files there its own), the harness's
    Python with its packages (a profile runs `{python}`), and the model files' directories."""
    python = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
              *(p for p in sys.path if os.path.isabs(p) and os.path.isdir(p))]
    models = [os.path.dirname(os.path.realpath(m.path)) for m in job.models]
    return tuple(dict.fromkeys([str(jobdir), *python, *models]))


def _check_works(act: Active) -> None:
    """bubblewrap needs user namespaces, which some kernels and distributions restrict: find
    out once per job, as infrastructure's failure, not as every run's crash."""
    launcher = act.launcher or [sys.executable, "-I", str(EXEC)]
    done = subprocess.run([*launcher, "check", act.user], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise SandboxError((done.stderr.strip() or done.stdout.strip()
                            or f"sandbox check exit {done.returncode}").splitlines()[-1])


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
    private_records(jobdir)
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
    private_cache(cache_dir)


def private_records(jobdir: Path) -> None:
    """The logs directory and the job's records become the harness's alone before any run: a
    sandboxed run traverses the job directory (0711) and knows these names. The harness writes
    status.json and results.json 0600 anew (engine.harness.steps); the logs inherit the
    directory's protection whatever their own mode."""
    safe_io.harness_dir(jobdir / LOGS, 0o700)
    for name in RECORDS:
        path = jobdir / name
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o600)


def private_cache(cache_dir: str | None) -> None:
    """The box's cache (builds, token ids, reference logits): the harness's alone, 0700, so no
    sandboxed run lists or reads it, whoever filled it (an evaluation or warm-reference)."""
    if cache_dir:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        os.chmod(cache_dir, 0o700)


def _fetch(repo: str, jobdir: Path) -> Path | None:
    """Mirror the repository as the harness, with network; the sandbox then clones offline.

    A failed fetch leaves the job's repository as it was: the sandboxed checkout then fails and
    the harness reports a checkout failure, which is infrastructure's."""
    mirror = jobdir / "repo.git"
    log = jobdir / LOGS / "fetch.log"
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
    """argv and environment that start `argv` inside the sandbox, through the launcher.

    A root harness runs the launcher as a process of its own too: it opens pipes bwrap reads
    (the run's /etc files), which a set-up between fork and exec could not pass on."""
    act = _active
    if act is None:
        return argv, env, None
    home = env.get("HOME", "")
    limits = act.limits[act.stage(cwd.resolve())]
    spec: dict[str, object] = {
        "user": act.user, "hostname": act.hostname, "network": act.network,
        "limits": _rlimits(limits), "tmpfs_mb": limits["tmpfs_mb"], "cwd": str(cwd),
        "env": {**env, **_git_trust(act.mirror)}, "home": home if home.startswith(
            str(act.jobdir / HOMES) + "/") else "",
        "ro": list(act.visible), "rw": _writable(act, argv, cwd.resolve())}
    launcher = act.launcher or [sys.executable, "-I", str(EXEC)]
    outer = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
    return [*launcher, "run", json.dumps(spec), "--", *argv], outer, None


def _rlimits(limits: dict[str, int]) -> dict[str, int]:
    """The launcher's share of a stage's limits: its rlimits, each process's data capped at
    the run's memory cap unless the limits say otherwise."""
    return {k: v for k, v in {"data_mb": limits["memory_mb"], **limits}.items()
            if k in RLIMIT_KEYS}


def caps(argv: list[str], cwd: Path) -> caps_of.Caps | None:
    """What a run of argv in `cwd` may use of the box, beyond its rlimits, and the places it
    may write; None outside a sandbox."""
    act = _active
    if act is None:
        return None
    limits = act.limits[act.stage(cwd.resolve())]
    places = tuple(Path(p) for p in _writable(act, argv, cwd.resolve()))
    return caps_of.Caps(limits.get("memory_mb"), limits.get("disk_mb"), act.jobdir, places)


def applied() -> dict[str, object] | None:
    """The limits each stage's runs get on this box, and whether a memory cgroup caps them
    (the results' box facts); None outside a sandbox."""
    if _active is None:
        return None
    return {**{stage: dict(limits) for stage, limits in _active.limits.items()},
            "memory_cgroup": memory_cap.available()}


def purge_command(argv: list[str], cwd: Path) -> tuple[list[str], Path, Path] | None:
    """The run (argv, cwd, log) that empties the places a run of `argv` past its disk cap wrote
    (its side's tree, its output directories), as the sandbox user who owns what it wrote
    there: the box gets its room back for the next job, whoever the harness runs as. (A bound
    output directory stays, empty: the harness removes it.) None outside a sandbox."""
    act = _active
    places = _writable(act, argv, cwd.resolve()) if act is not None else []
    if act is None or not places:
        return None
    trees = act.jobdir / "trees"
    in_trees = any(p == str(trees) or trees in Path(p).parents for p in places)
    return (["/bin/sh", "-c", 'chmod -R u+rwX -- "$@"; rm -rf -- "$@"', "sh", *places],
            trees if in_trees else act.jobdir, act.jobdir / LOGS / "purge.log")


def _writable(act: Active, argv: list[str], cwd: Path) -> list[str]:
    """The run's own places of the job directory: the output directories its argv names (made
    for that run alone) and, in a build stage, its side's tree (a checkout makes the trees');
    the other side's tree and everything else stay read-only whatever their permissions."""
    outputs = act.jobdir / "outputs"
    named = [Path(a.rsplit("=", 1)[-1]) for a in argv]  # a path, or an --option=path
    found = [str(outputs / p.relative_to(outputs).parts[0]) for p in named
             if p.is_absolute() and outputs in p.parents]
    trees = act.jobdir / "trees"
    if cwd == trees:
        found.append(str(trees))
    elif trees in cwd.parents:
        found.append(str(trees / cwd.relative_to(trees).parts[0]))
    return [p for p in dict.fromkeys(found) if os.path.isdir(p)]


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
    """After every run: nothing of the sandbox user survives and the GPU is idle. What the run
    wrote to its private directories (its HOME included) ended with its mount namespace; the
    HOME's mount point, empty, goes."""
    if _active is not None:
        kill_all()
    if home is not None:
        safe_io.remove_tree(home)
    if _active is not None:
        _wait_gpu_idle(_active.gpu_idle_timeout_s)


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
