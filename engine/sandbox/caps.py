"""What one sandboxed run may use of the box, and how the harness sees it go past.

The profile's `limits` (docs/profiles.md), per stage, merged over the box's defaults by
engine.sandbox.session: `memory_mb` (each process's RLIMIT_DATA, and the run's memory cgroup
where the harness may make one: its processes and its tmpfs pages together), `tmpfs_mb` (each
private tmpfs of the run: /tmp, /var/tmp, /run, /dev/shm, its HOME) and `disk_mb` (what the run
may add to the job directory's file system: a build's tree, a run's output directory). A run
past its memory cgroup or its disk cap is stopped and its failure names the cap; a head's is the
PR's (REJECT, never retried), main's is infrastructure's.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

MB = 1 << 20


@dataclass(frozen=True)
class Caps:
    memory_mb: int | None
    disk_mb: int | None
    disk_path: Path  # the job directory: every place a run may write on disk is under it
    places: tuple[Path, ...] = ()  # the places of it this run may write (engine/sandbox/session.py)

    def memory_reason(self) -> str:
        return (f"went past its memory cap of {self.memory_mb} MB (its processes and its "
                "tmpfs together)")

    def disk_watch(self) -> DiskWatch | None:
        if self.disk_mb is None or not self.places:
            return None
        return DiskWatch(self.disk_path, self.places, self.disk_mb)


class DiskWatch:
    """What a run added to the places it may write. Cheap first: the job directory's file
    system grew by more than the cap since the run started (a statvfs); only then the places
    are measured (a walk, at most once a second), so a neighbour's writes on a shared disk are
    never the run's. A place the harness cannot read (a directory the run closed) leaves the
    file system's growth as the measure. A disk that fills before the run reaches its cap is the
    box's lack of room, not the run's excess (engine/harness/steps.py)."""

    def __init__(self, path: Path, places: tuple[Path, ...], cap_mb: int) -> None:
        self.path, self.places, self.cap_mb = path, places, cap_mb
        self.start = used_bytes(path)
        self.own_start, _ = usage(places)
        self.walked = 0.0

    def over(self) -> str:
        """Why the run is past its cap ("" while it is not)."""
        cap = self.cap_mb * MB
        if used_bytes(self.path) - self.start <= cap or time.monotonic() - self.walked < 1.0:
            return ""
        self.walked = time.monotonic()
        own, complete = usage(self.places)
        if own - self.own_start > cap or not complete:
            return f"wrote more than its disk cap of {self.cap_mb} MB"
        return ""

    def at_end(self) -> str:
        """The last look, whenever the last walk was (a burst just before the run ended)."""
        self.walked = 0.0
        return self.over()


def used_bytes(path: Path) -> int:
    fs = os.statvfs(path)
    return (fs.f_blocks - fs.f_bfree) * fs.f_frsize


def usage(places: tuple[Path, ...]) -> tuple[int, bool]:
    """Bytes the files under `places` hold on disk (each inode once, links not followed), and
    whether every directory could be read."""
    seen: set[tuple[int, int]] = set()
    total, complete = 0, True
    todo = list(places)
    while todo:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:
            complete = False
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                todo.append(Path(entry.path))
    return total, complete


def box_memory_mb() -> int:
    """The box's RAM, of which the default caps take their shares."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // MB


def default_limits() -> dict[str, int]:
    """Where the profile sets none: half the RAM per run (its memory cgroup, each process's
    data), and a sixteenth per private tmpfs (six of them: 3/8 of it). No disk cap: a full disk
    is then the box's condition, as before caps (engine/harness/steps.py)."""
    ram = box_memory_mb()
    return {"memory_mb": max(ram // 2, 256), "tmpfs_mb": max(ram // 16, 16)}
