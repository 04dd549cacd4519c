"""A run's own cgroups: the CPU time of every process it started, and its memory cap.

A process's rusage counts only the children it waited for, so work done by an orphan (a child
that outlives its parent, a double-forked daemon) is invisible to it. A cgroup counts every
process that ever ran in it, exited or not, and a process cannot leave it without write access
to another cgroup, which the sandbox user never has. Only a harness that may create cgroups
(root, or a delegated subtree) has this clock; elsewhere `make` returns None and a witness is
timed by the handoff clock alone (engine/measure/speed.py). The same run's memory cap
(engine/sandbox/memory_cap.py) lives in its v2 cgroup, or in a v1 memory cgroup beside it.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .memory_cap import MemoryGroup

# (the hierarchy, the usage file, seconds per unit): cgroup v2 (unified or hybrid), then v1
HIERARCHIES = (
    (Path("/sys/fs/cgroup"), "cpu.stat", 1e-6),
    (Path("/sys/fs/cgroup/unified"), "cpu.stat", 1e-6),
    (Path("/sys/fs/cgroup/cpuacct"), "cpuacct.usage", 1e-9),
)
PARENT = "evalbot-runs"


@dataclass(frozen=True)
class RunCgroup:
    path: Path
    usage_file: str
    unit_s: float
    memory: MemoryGroup | None = None  # where the run's memory is capped; None: not capped

    @classmethod
    def make(cls, memory_bytes: int | None = None) -> RunCgroup | None:
        """A fresh cgroup for one run (capped at `memory_bytes` where a memory cgroup can be
        made), or None where this process may not create one."""
        for root, usage, unit in HIERARCHIES:
            if not (root / usage).exists() and not (root / "cgroup.procs").exists():
                continue
            path = root / PARENT / f"run-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                path.mkdir(parents=True)
            except OSError:
                continue
            group = cls(path, usage, unit)
            try:
                group.usage_s()
            except (OSError, ValueError):
                group.remove()
                continue
            if memory_bytes is None:
                return group
            v2 = path if usage == "cpu.stat" else None
            return cls(path, usage, unit, MemoryGroup.make(memory_bytes, v2))
        return None

    def dirs(self) -> list[Path]:
        return [self.path] + ([self.memory.path] if self.memory and self.memory.path != self.path
                              else [])

    def join(self) -> None:
        """Move the calling process into the cgroup (run between fork and exec: every process
        it starts is born inside)."""
        for path in self.dirs():
            fd = os.open(path / "cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)

    def oom_killed(self) -> bool:
        """Was a process of the run killed for going past its memory cap?"""
        return self.memory is not None and self.memory.oom_killed()

    def usage_s(self) -> float:
        """CPU seconds of every process that ran in the cgroup, living or gone."""
        text = (self.path / self.usage_file).read_text()
        if self.usage_file == "cpu.stat":
            fields = dict(line.split() for line in text.splitlines() if line.strip())
            return int(fields["usage_usec"]) * self.unit_s
        return int(text.strip()) * self.unit_s

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.dirs():
            try:
                found.update(int(p) for p in (path / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return sorted(found)

    def kill_all(self) -> None:
        """SIGKILL whatever still runs in the cgroup (a daemon that left its process group)."""
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def remove(self) -> bool:
        """Remove the cgroup once it is empty; False while a process is still in it."""
        gone = True
        for path in reversed(self.dirs()):
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                gone = False
        return gone


def available() -> bool:
    """May this harness time a run by its cgroup? (made and removed at once)"""
    group = RunCgroup.make()
    return group is not None and group.remove()


@contextmanager
def run_cgroup(wanted: bool, memory_bytes: int | None = None) -> Iterator[RunCgroup | None]:
    """A cgroup for one run when `wanted` and possible, capped at `memory_bytes` where it can
    be; at the end whatever still runs in it is killed and it is removed (waiting a few
    seconds for the kernel to let its processes go)."""
    group = RunCgroup.make(memory_bytes) if wanted else None
    try:
        yield group
    finally:
        if group is not None:
            deadline = time.monotonic() + 10.0
            while not group.remove() and time.monotonic() < deadline:
                group.kill_all()
                time.sleep(0.02)
