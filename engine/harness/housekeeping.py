"""Housekeeping on the box: retention and eviction of job directories, builds and references.

    python -m engine.harness.housekeeping --workdir W [--jobs-days 14] [--builds-days 30]
        [--reference-days 90] [--budget-gb G] [--grace-s 3600] [--dry-run] [--json]

Under W live jobs/<id> (one per evaluation, earlier attempts as <id>.attempt-<t>),
cache/builds/<key> (engine.sides.build's build cache), cache/reference/<key>/ (the reference's
rows: engine/scoring/reference_cache.py) and cache/main-scores/<key>/ (main's rows per build of
main, kept as long as builds: engine/scoring/main_scores.py). An entry goes when it is older
than its kind's retention, and then, oldest use first, while the total is over the disk budget.
Never evicted:
- a running job: its status.json step is not "done" and its harness (the pid in status.json or
  harness.pid) is alive; a job directory holding a `keep.lock` file; a job younger than the
  grace period (it may be between preparation and start, before it has a pid);
- the builds a running job uses (its job.json names the SHAs and recipe: the cache keys);
- while any job runs or starts: every reference entry and unfinished (.tmp) cache entry,
  whose users cannot be told from the outside.
A build's last use is the newest of its own time and the jobs that used it. Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..contract.checks import ContractError
from ..contract.job import load_job
from ..sides.build import _cache_key

KEEP = "keep.lock"
RUNNING, STARTING = "running", "younger than the grace period"
DAY_S = 86400.0


@dataclass(frozen=True)
class Retention:
    jobs_days: float = 14.0
    builds_days: float = 30.0
    reference_days: float = 90.0
    budget_bytes: int | None = None  # None: no disk budget, age only
    grace_s: float = 3600.0


@dataclass
class Entry:
    kind: str  # job | build | reference | main-scores
    path: str
    size: int
    last_used: float
    protected: str = ""  # why it must stay; "" when it may go


@dataclass
class Report:
    evicted: list[dict[str, object]] = field(default_factory=list)
    in_use: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    bytes_before: int = 0
    bytes_after: int = 0
    over_budget: int = 0  # bytes still over the budget after eviction (all in use)


def size_of(path: Path) -> int:
    """Bytes on disk under path, never following symlinks (a job may hold links out)."""
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    total = 0
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue  # vanished while we walked: nothing to count
    return total


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process (the sandbox, or root's harness)
    return True


def _read_json(path: Path) -> dict[str, object]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _pids(jobdir: Path) -> list[int]:
    pids = []
    status_pid = _read_json(jobdir / "status.json").get("pid")
    if isinstance(status_pid, int):
        pids.append(status_pid)
    try:
        text = (jobdir / "harness.pid").read_text().strip()
    except OSError:
        text = ""
    if text.isdigit():
        pids.append(int(text))
    return pids


def running(jobdir: Path) -> bool:
    """The harness of this job directory is still at work."""
    step = _read_json(jobdir / "status.json").get("step")
    return step != "done" and any(alive(p) for p in _pids(jobdir))


def _newest(path: Path, names: tuple[str, ...]) -> float:
    times = [path.lstat().st_mtime]
    for name in names:
        try:
            times.append((path / name).lstat().st_mtime)
        except OSError:
            continue
    return max(times)


def build_keys(jobdir: Path) -> set[str]:
    """The build cache entries this job reads or writes (engine.sides.build's key of each side)."""
    try:
        job = load_job(jobdir / "job.json")
    except ContractError:
        return set()
    return {_cache_key(job, job.base_sha), _cache_key(job, job.head_sha)}


def scan(workdir: Path, retention: Retention, now: float) -> list[Entry]:
    jobs_root = workdir / "jobs"
    jobs = sorted(jobs_root.iterdir()) if jobs_root.is_dir() else []
    entries: list[Entry] = []
    busy_keys: set[str] = set()
    used: dict[str, float] = {}
    for jobdir in (j for j in jobs if j.is_dir() and not j.is_symlink()):
        last = _newest(jobdir, ("status.json", "harness.log", "results.json", "job.json"))
        why = (RUNNING if running(jobdir) else
               f"pinned by {KEEP}" if (jobdir / KEEP).exists() else
               STARTING if now - last < retention.grace_s else "")
        keys = build_keys(jobdir)
        for key in keys:
            used[key] = max(used.get(key, 0.0), last)
        if why:
            busy_keys |= keys
        entries.append(Entry("job", str(jobdir), size_of(jobdir), last, why))
    # a pinned job is kept, not active: only a live or starting harness may read the caches
    busy = any(e.protected in (RUNNING, STARTING) for e in entries)
    builds = workdir / "cache" / "builds"
    for entry in sorted(builds.iterdir()) if builds.is_dir() else []:
        tmp = entry.name.endswith(".tmp")
        last = max(_newest(entry, ("manifest.json",)), used.get(entry.name, 0.0))
        why = ("used by a running job" if entry.name in busy_keys else
               "being written while a job runs" if tmp and busy else "")
        entries.append(Entry("build", str(entry), size_of(entry), last, why))
    for kind in ("reference", "main-scores"):  # folders of score rows, used when read
        folder = workdir / "cache" / kind
        for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
            why = f"a job is running (its {kind} are not known from outside)" if busy else ""
            entries.append(Entry(kind, str(entry), size_of(entry), entry.lstat().st_mtime, why))
    return entries


def plan(entries: list[Entry], retention: Retention, now: float) -> list[tuple[Entry, str]]:
    """What to evict and why: age first, then oldest use first while over the budget."""
    keep_s = {"job": retention.jobs_days, "build": retention.builds_days,
              "reference": retention.reference_days,
              "main-scores": retention.builds_days}  # main's rows live as long as its build
    free = [e for e in entries if not e.protected]
    out = [(e, f"older than {keep_s[e.kind]:g} days") for e in free
           if now - e.last_used > keep_s[e.kind] * DAY_S]
    if retention.budget_bytes is not None:
        gone = {e.path for e, _ in out}
        total = sum(e.size for e in entries if e.path not in gone)
        for e in sorted((e for e in free if e.path not in gone), key=lambda e: e.last_used):
            if total <= retention.budget_bytes:
                break
            out.append((e, f"over the disk budget of {retention.budget_bytes} bytes"))
            total -= e.size
    return out


def housekeep(workdir: Path, retention: Retention, dry_run: bool = False,
              now: float | None = None) -> Report:
    now = time.time() if now is None else now
    entries = scan(workdir, retention, now)
    report = Report(bytes_before=sum(e.size for e in entries))
    report.in_use = [f"{e.kind} {Path(e.path).name}: {e.protected}" for e in entries
                     if e.protected]
    removed = 0
    for entry, why in plan(entries, retention, now):
        if not dry_run:
            try:
                _remove(Path(entry.path))
            except OSError as exc:
                report.errors.append(f"{entry.kind} {Path(entry.path).name}: {exc}")
                continue
        removed += entry.size
        report.evicted.append({"kind": entry.kind, "name": Path(entry.path).name,
                               "bytes": entry.size, "why": why})
    report.bytes_after = report.bytes_before - removed
    if retention.budget_bytes is not None:
        report.over_budget = max(0, report.bytes_after - retention.budget_bytes)
    return report


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.harness.housekeeping", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--jobs-days", type=float, default=Retention.jobs_days)
    ap.add_argument("--builds-days", type=float, default=Retention.builds_days)
    ap.add_argument("--reference-days", type=float, default=Retention.reference_days)
    ap.add_argument("--budget-gb", type=float, default=None, help="disk budget for all three")
    ap.add_argument("--grace-s", type=float, default=Retention.grace_s)
    ap.add_argument("--dry-run", action="store_true", help="report, remove nothing")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    a = ap.parse_args(argv)
    if not a.workdir.is_dir():
        print(f"housekeeping: {a.workdir} is not a directory", file=sys.stderr)
        return 2
    if min(a.jobs_days, a.builds_days, a.reference_days, a.grace_s) < 0 or \
            (a.budget_gb is not None and a.budget_gb < 0):
        print("housekeeping: retention, grace and budget must not be negative", file=sys.stderr)
        return 2
    budget = None if a.budget_gb is None else int(a.budget_gb * 1e9)
    report = housekeep(a.workdir, Retention(a.jobs_days, a.builds_days, a.reference_days,
                                            budget, a.grace_s), a.dry_run)
    if a.json:
        print(json.dumps(asdict(report), sort_keys=True))
    else:
        for e in report.evicted:
            print(f"{'would evict' if a.dry_run else 'evicted'} {e['kind']} {e['name']} "
                  f"({e['bytes']} bytes): {e['why']}")
        for line in report.in_use:
            print(f"kept {line}")
        print(f"{report.bytes_before} -> {report.bytes_after} bytes"
              + (f"; {report.over_budget} bytes over budget, all in use" if report.over_budget
                 else ""))
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
