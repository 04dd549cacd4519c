"""Run one untrusted engine process: own process group, timeout, capped output, always reaped."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine import sandbox

LOG_CAP = 1 << 20  # bytes of output kept per process; the rest is dropped, not buffered


@dataclass(frozen=True)
class Finished:
    returncode: int | None  # None when killed for the timeout
    output: str
    wall_s: float
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def run(
    argv: Sequence[str],
    *,
    cwd: Path,
    timeout_s: float,
    log: Path,
    env: Mapping[str, str] | None = None,
) -> Finished:
    """Run argv (never through a shell), write its output to `log`, kill its group at the end.

    Inside an active sandbox (engine.sandbox.enter) argv runs as the sandbox user with the
    stage's limits, and afterwards every process of that user is killed."""
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", **(env or {})}
    argv, full_env, preexec = sandbox.wrap(list(argv), cwd, full_env)
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec,
        )
        timed_out = False
        try:
            _drain(proc, sink, start + timeout_s)
        except TimeoutError:
            timed_out = True
        finally:
            _kill_group(proc)
    wall = time.perf_counter() - start
    output = log.read_bytes().decode("utf-8", errors="replace")
    return Finished(None if timed_out else proc.returncode, output, wall, timed_out)


def _drain(proc: subprocess.Popen[bytes], sink: object, deadline: float) -> None:
    import selectors

    assert proc.stdout is not None
    written = 0
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError
            if not sel.select(timeout=min(left, 1.0)):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            if written < LOG_CAP:
                sink.write(chunk[: LOG_CAP - written])  # type: ignore[attr-defined]
                written += len(chunk)
    left = max(deadline - time.perf_counter(), 0.01)
    try:
        proc.wait(timeout=left)
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError from exc


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill everything the sample started, so nothing lingers into the next sample.

    The process group catches ordinary children; the sandbox's kill reaches the ones that left
    the group (setsid, double fork), since it kills by user, not by group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # a sudo launcher is root's: the sandbox's kill below ends it through its child
    try:
        sandbox.after_run()
    finally:
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
