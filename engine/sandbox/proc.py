"""Run one engine process: own process group, timeout, capped output, always reaped.

Every run gets a HOME/TMPDIR of its own, made empty before and removed after, so nothing one
run plants (a `usercustomize.py`, a `.pth` file, a cache) reaches another; every Python it starts
directly runs isolated (`-I`: no user site, no PYTHON* variables, no cwd on sys.path)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from . import cpu_meter
from . import session as sandbox
from .caps import Caps, DiskWatch

LOG_CAP = 1 << 20  # bytes of output kept per process; the rest is dropped, not buffered
PIPE_DEFAULT = 1 << 16  # Linux's pipe buffer unless grown (`_hold`)
WATCH_S = 0.2  # how often a run's disk growth is looked at (a statvfs: microseconds)
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
# Under -I Python puts neither the script's directory nor the cwd on sys.path; a script that
# imports its siblings, or `-m` run from the harness, needs exactly that one entry, so this
# bootstrap adds it back (the script's own directory; the cwd for -m) and nothing else.
_BOOTSTRAP = ("import os, runpy, sys\n"
              "mode, target = sys.argv[1], sys.argv[2]\n"
              "sys.argv = [target, *sys.argv[3:]]\n"
              "if mode == 'module':\n"
              "    sys.path.insert(0, os.getcwd())\n"
              "    runpy.run_module(target, run_name='__main__', alter_sys=True)\n"
              "else:\n"
              "    sys.path.insert(0, os.path.dirname(os.path.abspath(target)))\n"
              "    runpy.run_path(target, run_name='__main__')\n")


@dataclass(frozen=True)
class Handoff:
    """Hand the process its input only once it says it is ready, and time from there.

    The process prints `ready` on a line of its own when its start-up (model load) is done; the
    harness then writes `prompt` to its stdin. Each output line starting with `prefix` is then
    answered with the next of `steps` (one line each), so a step's input exists only after the
    previous step's output was read; after the output line that answers the last step (the first
    one, without steps) the clock stops and stdin closes. Start-up jitter stays out of the time,
    and no input can be known before the clock starts."""

    ready: bytes
    prompt: bytes
    prefix: bytes
    steps: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class Finished:
    returncode: int | None  # None when killed for the timeout
    output: str
    wall_s: float
    timed_out: bool
    handoff_s: float | None = None  # with a Handoff: ready-and-fed to output read; None if not
    cpu_s: float | None = None  # with a cgroup: its CPU time over the handoff's span (or all)
    exceeded: str = ""  # the cap it went past (engine/sandbox/caps.py), in the harness's words

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.exceeded

    @property
    def why(self) -> str:
        """Why it failed, in the harness's words (never the process's)."""
        return self.exceeded or ("timeout" if self.timed_out else f"exit status {self.returncode}")


def run(
    argv: Sequence[str],
    *,
    cwd: Path,
    timeout_s: float,
    log: Path,
    env: Mapping[str, str] | None = None,
    trusted: bool = False,
    handoff: Handoff | None = None,
    cpu_clock: bool = False,
) -> Finished:
    """Run argv (never through a shell), write its output to `log`, kill its group at the end.

    Inside an active sandbox (engine.sandbox.session.enter) argv runs as the sandbox user with the
    stage's limits and caps (engine/sandbox/caps.py: a memory cgroup of its own where the harness
    may make one, its disk growth watched), and afterwards every process of that user is killed.
    A `trusted` run (the reference, the tokenizer: harness code) never runs as the sandbox user:
    it runs as the harness, in a HOME only the harness can enter. With `cpu_clock` (cpu_meter)
    the process starts inside a cgroup of its own where one can be made: every process it starts
    is counted (`cpu_s`) and killed at the end."""
    home = sandbox.fresh_home(trusted)
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C",
                **{k: v for k, v in (env or {}).items() if not k.startswith("PYTHON")},
                "HOME": str(home), "TMPDIR": str(home)}
    wanted, preexec = isolated(list(argv)), None
    caps = None if trusted else sandbox.caps(wanted, cwd)
    if not trusted:
        argv, full_env, preexec = sandbox.wrap(wanted, cwd, full_env)
    try:
        done = _capped(list(argv), cwd, timeout_s, log, full_env, preexec, handoff, cpu_clock,
                       caps)
        purge = sandbox.purge_command(wanted, cwd) if done.exceeded.startswith("wrote") else None
        if purge is not None:  # past its disk cap: the room goes back to the box
            run(purge[0], cwd=purge[1], timeout_s=600, log=purge[2])
        return done
    finally:
        sandbox.after_run(home)


def _capped(argv: list[str], cwd: Path, timeout_s: float, log: Path, full_env: dict[str, str],
            preexec: sandbox.Preexec | None, handoff: Handoff | None, cpu_clock: bool,
            caps: Caps | None) -> Finished:
    """The run inside its cgroup (CPU clock, memory cap) and under its disk watch."""
    memory = caps.memory_mb << 20 if caps is not None and caps.memory_mb else None
    with cpu_meter.run_cgroup(cpu_clock or memory is not None, memory) as cgroup:
        if cgroup is not None:
            preexec = _joined(cgroup, preexec)
        watch = caps.disk_watch() if caps is not None else None
        done = _run(argv, cwd, timeout_s, log, full_env, preexec, handoff, cgroup, watch)
        if caps is not None and cgroup is not None and cgroup.oom_killed():
            return replace(done, exceeded=caps.memory_reason())
    return done


def _joined(cgroup: cpu_meter.RunCgroup,
            then: sandbox.Preexec | None) -> sandbox.Preexec:
    """The child joins the run's cgroup before anything else (the sandbox's set-up included)."""
    def preexec() -> None:
        cgroup.join()
        if then is not None:
            then()
    return preexec


def isolated(argv: list[str]) -> list[str]:
    """argv with a Python interpreter started isolated (-I); other programs unchanged."""
    if not argv or not _PYTHON.fullmatch(os.path.basename(argv[0])):
        return argv
    python, rest = argv[0], argv[1:]
    if rest and rest[0] == "-m" and len(rest) > 1:
        return [python, "-I", "-c", _BOOTSTRAP, "module", *rest[1:]]
    if rest and not rest[0].startswith("-"):
        return [python, "-I", "-c", _BOOTSTRAP, "script", *rest]
    return [python, "-I", *rest]


def _run(argv: list[str], cwd: Path, timeout_s: float, log: Path, full_env: dict[str, str],
         preexec: sandbox.Preexec | None, handoff: Handoff | None = None,
         cgroup: cpu_meter.RunCgroup | None = None, watch: DiskWatch | None = None) -> Finished:
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "wb", buffering=0) as sink:  # unbuffered: no flush left to fail at close
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=full_env,
            stdin=subprocess.PIPE if handoff else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec,
        )
        timed_out, exceeded = False, ""
        clock = _Clock(proc, handoff, cgroup.usage_s if cgroup is not None else None)
        try:
            _drain(proc, sink, start + timeout_s, clock, watch)
        except TimeoutError:
            timed_out = True
        except Exceeded as exc:
            exceeded = str(exc)
        finally:
            clock.close()
            _kill_group(proc, cgroup)
    wall = time.perf_counter() - start
    output = log.read_bytes().decode("utf-8", errors="replace")
    cpu = clock.cpu_seconds() if handoff else cgroup.usage_s() if cgroup is not None else None
    exceeded = exceeded or (watch.at_end() if watch is not None else "")  # a burst at its end
    return Finished(None if timed_out else proc.returncode, output, wall, timed_out,
                    clock.seconds(), cpu, exceeded)


class Exceeded(Exception):
    """The run went past a cap the harness watches while it runs (its disk)."""


class _Clock:
    """The handoff protocol over the output as it streams: feed at `ready`, answer each output
    line with the next step, stop at the last output line. `meter` (the run's CPU clock, when
    it has one) is read at the same two moments."""

    def __init__(self, proc: subprocess.Popen[bytes], handoff: Handoff | None,
                 meter: Callable[[], float] | None = None) -> None:
        self.proc, self.handoff, self.meter, self.line = proc, handoff, meter, b""
        self.fed: float | None = None
        self.read: float | None = None
        self.cpu: list[float] = []
        self.answered = 0  # output lines seen since the feed

    def see(self, chunk: bytes) -> None:
        if self.handoff is None or self.read is not None:
            return
        self.line += chunk
        *complete, self.line = self.line.split(b"\n")
        for line in complete:
            if self.fed is None and line.strip() == self.handoff.ready:
                self._feed()
            elif self.fed is not None and line.startswith(self.handoff.prefix):
                if self.answered == len(self.handoff.steps):
                    self.read = time.perf_counter()
                    self._read_meter()
                    self.close()
                    return
                self._write(self.handoff.steps[self.answered])
                self.answered += 1

    def _feed(self) -> None:
        assert self.proc.stdin is not None and self.handoff is not None
        self._read_meter()
        self.fed = time.perf_counter()
        os.set_blocking(self.proc.stdin.fileno(), False)  # a process that stops reading
        _hold(self.proc.stdin.fileno(), len(self.handoff.prompt))
        self._write(self.handoff.prompt)  # never blocks the harness: its clock just never stops
        if not self.handoff.steps:
            self.close()

    def _write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        if self.proc.stdin.closed:
            return
        try:  # a process that stopped reading gets nothing more: its output cannot verify
            if os.write(self.proc.stdin.fileno(), data) == len(data):
                return
        except (BrokenPipeError, BlockingIOError, OSError):
            pass
        self.close()

    def _read_meter(self) -> None:
        if self.meter is not None:
            self.cpu.append(self.meter())

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass

    def seconds(self) -> float | None:
        return None if self.fed is None or self.read is None else self.read - self.fed

    def cpu_seconds(self) -> float | None:
        return self.cpu[1] - self.cpu[0] if len(self.cpu) == 2 and self.read else None


def _hold(fd: int, size: int) -> None:
    """Grow the pipe to hold a whole prompt line (a 65536-id prompt is ~460 KB; Linux's default
    pipe is 64 KiB, its unprivileged maximum 1 MiB), so the prompt's one write never waits on
    the process. Where it cannot grow, a longer prompt's write is cut and the process gets no
    more input: its output cannot verify, never a wrong figure."""
    if size > PIPE_DEFAULT:
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)


def _drain(proc: subprocess.Popen[bytes], sink: object, deadline: float, clock: _Clock,
           watch: DiskWatch | None = None) -> None:
    import selectors

    assert proc.stdout is not None
    written = 0
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError
            if watch is not None and (why := watch.over()):
                raise Exceeded(why)
            if not sel.select(timeout=min(left, WATCH_S if watch is not None else 1.0)):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            clock.see(chunk)
            if written < LOG_CAP:
                try:
                    sink.write(chunk[: LOG_CAP - written])  # type: ignore[attr-defined]
                    written += len(chunk)
                except OSError:  # a full disk (the run filled it?): the log ends, the run goes on
                    written = LOG_CAP
    while True:  # its output closed; it may still be writing (the watch still looks)
        left = deadline - time.perf_counter()
        try:
            proc.wait(timeout=max(min(left, WATCH_S if watch is not None else left), 0.01))
            return
        except subprocess.TimeoutExpired as exc:
            if left <= 0:
                raise TimeoutError from exc
        if watch is not None and (why := watch.over()):
            raise Exceeded(why)


def _kill_group(proc: subprocess.Popen[bytes], cgroup: cpu_meter.RunCgroup | None = None) -> None:
    """Kill everything the sample started, so nothing lingers into the next sample.

    The process group catches ordinary children; the sandbox's kill reaches the ones that left
    the group (setsid, double fork), since it kills by user, not by group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # a sudo launcher is root's: the sandbox's kill below ends it through its child
    try:
        sandbox.kill_all()
        if cgroup is not None:
            cgroup.kill_all()
    finally:
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
