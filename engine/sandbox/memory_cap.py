"""A run's memory cap: a memory cgroup of its own, where the harness may make cgroups.

Every page the run's processes use counts against it, the pages of their private tmpfs mounts
included (a tmpfs page is charged to the cgroup that wrote it), and past the cap the kernel's
OOM killer picks a process of the run, never the harness or the bot. cgroup v2 (the memory
controller enabled for the harness's subtree) or v1 (the `memory` hierarchy). Self-contained:
stdlib only and no package imports, so `evalbot doctor` sends this file's text to a box to ask
whether it applies there (`probe`).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

V2 = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))  # unified, or hybrid's v2 part
V1 = Path("/sys/fs/cgroup/memory")
PARENT = "evalbot-runs"  # engine/sandbox/cpu_meter.py's too: one subtree of the harness's
CAPPED = "a memory cgroup per run"


@dataclass(frozen=True)
class MemoryGroup:
    path: Path
    version: int  # 1 or 2

    @classmethod
    def make(cls, limit_bytes: int, v2_group: Path | None = None) -> MemoryGroup | None:
        """A capped memory cgroup: `v2_group` itself (the run's cgroup v2, made for its CPU
        clock) where v2 has the memory controller, else a v1 one; None where neither can be."""
        for group in (_v2(v2_group), _v1()):
            if group is None:
                continue
            try:
                group.cap(limit_bytes)
                return group
            except OSError:
                if group.path != v2_group:
                    group.remove()
        return None

    def cap(self, limit_bytes: int) -> None:
        """The limit, and no swap beyond it (a swapped run would only be slower, not stopped)."""
        names = (("memory.max", "memory.swap.max") if self.version == 2 else
                 ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"))
        (self.path / names[0]).write_text(str(limit_bytes))
        if (self.path / names[1]).exists():
            (self.path / names[1]).write_text("0" if self.version == 2 else str(limit_bytes))

    def oom_killed(self) -> bool:
        """Did the kernel kill a process of the run for going past the cap?"""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            text = (self.path / name).read_text()
        except OSError:
            return False
        fields = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
        return int(fields.get("oom_kill", "0")) > 0

    def remove(self) -> bool:
        try:
            self.path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            return False


def _v2(group: Path | None) -> MemoryGroup | None:
    """The v2 group itself, once the memory controller is enabled for its parent's children."""
    if group is None or "memory" not in _words(group.parent / "cgroup.controllers"):
        return None
    parent = group.parent
    try:
        if "memory" not in _words(parent / "cgroup.subtree_control"):
            (parent / "cgroup.subtree_control").write_text("+memory")
    except OSError:
        return None
    return MemoryGroup(group, 2) if (group / "memory.max").exists() else None


def _v1() -> MemoryGroup | None:
    """Beneath the harness's own memory cgroup: whatever caps the harness caps its runs too."""
    if not (V1 / "memory.limit_in_bytes").exists():
        return None
    own = next((line.split(":", 2)[2].strip().lstrip("/") for line in _lines("/proc/self/cgroup")
                if line.split(":")[1:2] == ["memory"]), "")
    path = V1 / own / PARENT / f"run-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        path.mkdir(parents=True)
    except OSError:
        return None
    return MemoryGroup(path, 1)


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def _words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def available() -> bool:
    """May this harness cap a run's memory by a cgroup? (made and removed at once)"""
    return probe().startswith(CAPPED)


def probe() -> str:
    """Which memory cap a run gets here, as one line (`evalbot doctor`)."""
    roots = [root for root in V2 if (root / "cgroup.controllers").exists()]
    v2 = roots[0] / PARENT / f"probe-{secrets.token_hex(4)}" if roots else None
    try:
        if v2 is not None:
            v2.mkdir(parents=True)
    except OSError:
        v2 = None
    group = MemoryGroup.make(1 << 30, v2)
    for made in (group, MemoryGroup(v2, 2) if v2 else None):
        if made is not None:
            made.remove()
    if group is None:
        return "no memory cgroup (the harness may not make one): RLIMIT_DATA and sized tmpfs only"
    return f"{CAPPED} (cgroup v{group.version}), RLIMIT_DATA and sized tmpfs"


if __name__ == "__main__":
    print(probe())
