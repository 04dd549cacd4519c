"""The CPU time of every process one run started: a cgroup of its own per run.

A process's rusage counts only the children it waited for, so work done by an orphan (a child
that outlives its parent, a double-forked daemon) is invisible to it. A cgroup counts every
process that ever ran in it, exited or not, and a process cannot leave it without write access
to another cgroup, which the sandbox user never has. Only a harness that may create cgroups
(root, or a delegated subtree) has this clock; elsewhere `make` returns None and a witness is
timed by the handoff clock alone (engine/measure/speed.py).
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

    @classmethod
    def make(cls) -> RunCgroup | None:
        """A fresh cgroup for one run, or None where this process may not create one."""
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
                return group
            except (OSError, ValueError):
                group.remove()
        return None

    def join(self) -> None:
        """Move the calling process into the cgroup (run between fork and exec: every process
        it starts is born inside)."""
        fd = os.open(self.path / "cgroup.procs", os.O_WRONLY)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)

    def usage_s(self) -> float:
        """CPU seconds of every process that ran in the cgroup, living or gone."""
        text = (self.path / self.usage_file).read_text()
        if self.usage_file == "cpu.stat":
            fields = dict(line.split() for line in text.splitlines() if line.strip())
            return int(fields["usage_usec"]) * self.unit_s
        return int(text.strip()) * self.unit_s

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill_all(self) -> None:
        """SIGKILL whatever still runs in the cgroup (a daemon that left its process group)."""
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def remove(self) -> bool:
        """Remove the cgroup once it is empty; False while a process is still in it."""
        try:
            self.path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            return False


def available() -> bool:
    """May this harness time a run by its cgroup? (made and removed at once)"""
    group = RunCgroup.make()
    return group is not None and group.remove()


@contextmanager
def run_cgroup(wanted: bool) -> Iterator[RunCgroup | None]:
    """A cgroup for one run when `wanted` and possible; at the end whatever still runs in it is
    killed and it is removed (waiting a few seconds for the kernel to let its processes go)."""
    group = RunCgroup.make() if wanted else None
    try:
        yield group
    finally:
        if group is not None:
            deadline = time.monotonic() + 10.0
            while not group.remove() and time.monotonic() < deadline:
                group.kill_all()
                time.sleep(0.02)
