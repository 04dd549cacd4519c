"""`python -m engine warm-reference JOB.json --jobdir DIR [--batch N]`: fill the box's reference
cache with every window of the job's correctness grid, so that no evaluation runs the reference.

Every short and long window of the grid (engine/scoring/windows.py), for the scored model and
each guard model, is looked up in the cache the evaluations use (engine/scoring/reference_cache.py,
keyed by this box's device), and the missing ones are scored in batches, each batch cached as
soon as it is scored: a run killed halfway loses at most the batch in flight, and a rerun scores
only the rest. Stdout gets a line per batch, `warm-reference: DONE/TOTAL windows, ...` (with
seconds and an ETA), and each model's seconds at the end; a failure is one line on stderr,
`warm-reference failed: ...`, and exit status 1. The bot runs it under the box's lock
(`evalbot warm-reference`, evalbot/service/warm_reference.py).
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

from ..contract.checks import ContractError
from ..contract.integrity import IntegrityError, verify_files
from ..contract.job import Correctness, Job, load_job
from ..measure import gpu
from ..sandbox import session as sandbox
from ..scoring.reference_cache import ReferenceCache
from ..scoring.tokens import ScoreFailure, Stream, scored_model, token_stream
from ..scoring.windows import Window, grid_windows
from .steps import HARNESS_ROOT, Status, job_of

PREFIX = "warm-reference:"
FAILED = "warm-reference failed:"
Say = Callable[[str], None]


class WarmFailure(Exception):
    """What stopped the warm-up, said in one line."""


@dataclass
class ModelWork:
    """One model's grid: its cache, how many windows, which are still to score."""

    name: str
    cache: ReferenceCache
    total: int
    missing: list[Window]
    seconds: float  # spent on this model: tokenizing, looking up, scoring


@dataclass
class Progress:
    total: int  # windows of every model's grid
    done: int  # windows cached (found or scored)
    left_tokens: int  # ids of the windows still to score: the ETA's unit
    scored_tokens: int = 0
    scoring_s: float = 0.0

    def advance(self, group: list[Window], seconds: float) -> None:
        tokens = sum(len(w.tokens) for w in group)
        self.done += len(group)
        self.left_tokens -= tokens
        self.scored_tokens += tokens
        self.scoring_s += seconds

    def line(self, what: str) -> str:
        eta = (f"{self.scoring_s / self.scored_tokens * self.left_tokens:.0f} s"
               if self.scored_tokens else "?")
        return (f"{PREFIX} {self.done}/{self.total} windows, {what}, {self.scoring_s:.1f} s "
                f"scoring, ETA {eta}")


def whole_grid(spec: Correctness, stream: Stream) -> list[Window]:
    """Every window an evaluation's seed could pick: long ones (from the long text) first."""
    long = (grid_windows(stream.long_ids or stream.ids, spec.long_window_tokens, "long")
            if spec.long_windows else [])
    return long + grid_windows(stream.ids, spec.window_tokens, "short")


def batches(missing: list[Window], spec: Correctness, batch: int) -> list[list[Window]]:
    """`batch` short windows per reference process; a long window counts for as many short ones
    as its ids make (at least one per process)."""
    out = []
    for kind, size in (("long", spec.long_window_tokens), ("short", spec.window_tokens)):
        todo = [w for w in missing if w.kind == kind]
        per = max(1, batch * spec.window_tokens // max(size, 1))
        out += [todo[i:i + per] for i in range(0, len(todo), per)]
    return out


def warm(job: Job, jobdir: Path, batch: int, device: str, say: Say) -> dict[str, float]:
    """Score every window of the grid the cache lacks; returns each model's seconds."""
    spec = _spec(job)
    works = [_model_work(job, name, jobdir, device)
             for name in [scored_model(job, spec).name, *spec.guards]]
    todo = sum(len(w.missing) for w in works)
    progress = Progress(sum(w.total for w in works), sum(w.total - len(w.missing) for w in works),
                        sum(len(win.tokens) for w in works for win in w.missing))
    say(progress.line(f"{progress.done} cached, {todo} to score "
                      f"({', '.join(w.name for w in works)})"))
    for work in works:
        for group in batches(work.missing, spec, batch):
            started = time.monotonic()
            _score(work, group, progress)
            seconds = time.monotonic() - started
            work.seconds += seconds
            progress.advance(group, seconds)
            say(progress.line(f"{work.name} {_named(group)}"))
    _summary(works, device, say)
    return {w.name: w.seconds for w in works}


def _summary(works: list[ModelWork], device: str, say: Say) -> None:
    """Each model's seconds, then the whole: the lines after the progress bar."""
    for work in works:
        say(f"{PREFIX} {work.name}: {work.seconds:.1f} s ({len(work.missing)} windows scored, "
            f"{work.total - len(work.missing)} were cached)")
    models = f"{len(works)} model{'s' if len(works) > 1 else ''}"
    say(f"{PREFIX} done: {sum(w.total for w in works)} windows of {models} cached on {device}")


def _spec(job: Job) -> Correctness:
    if job.correctness is None:
        raise WarmFailure(f"profile {job.profile} has no correctness section: nothing to warm")
    if not job.cache_dir:
        raise WarmFailure("the job names no cache_dir: the reference would be cached nowhere")
    return job.correctness


def _model_work(job: Job, name: str, jobdir: Path, device: str) -> ModelWork:
    started = time.monotonic()
    one = job_of(job, name)
    try:
        stream = token_stream(one, jobdir, HARNESS_ROOT)
    except ScoreFailure as exc:  # the tokenizer runs with the reference's trust
        raise WarmFailure(f"{name}: {exc.message}{_last_line(exc.log)}") from exc
    cache = ReferenceCache(one, stream, device, jobdir, HARNESS_ROOT)
    windows = whole_grid(_spec(one), stream)
    found = cache.lookup(windows)
    missing = [w for w in windows if (w.kind, w.index) not in found]
    return ModelWork(name, cache, len(windows), missing, time.monotonic() - started)


def _score(work: ModelWork, group: list[Window], progress: Progress) -> None:
    try:
        work.cache.score(group)
    except ScoreFailure as exc:
        raise WarmFailure(f"{work.name}: the reference score run of {_named(group)} failed: "
                          f"{exc.message}{_last_line(exc.log)}; {progress.done} of "
                          f"{progress.total} windows are cached, a rerun scores only the rest"
                          ) from exc


def _named(group: list[Window]) -> str:
    """The grid windows of a batch, e.g. "short windows 32-47" or "long window 7"."""
    idx = [w.index for w in group]
    plural = "s" if len(idx) > 1 else ""
    if idx == list(range(idx[0], idx[0] + len(idx))) and len(idx) > 2:
        return f"{group[0].kind} windows {idx[0]}-{idx[-1]}"
    return f"{group[0].kind} window{plural} {', '.join(map(str, idx))}"


def _last_line(log: Path | None) -> str:
    """The last line of a trusted run's log (the reference's, the tokenizer's): its own words."""
    try:
        lines = log.read_bytes()[-4000:].decode(errors="replace").strip().splitlines() \
            if log else []
    except OSError:
        lines = []
    return f": {lines[-1].strip()}" if lines else ""


def _prepare(job: Job, jobdir: Path) -> None:
    """No sandbox (the reference and the tokenizer run as the harness; no PR code runs here),
    the cache as private as an evaluation keeps it, the models checked against their pins."""
    sandbox.enter(replace(job, sandbox=None), jobdir)
    sandbox.private_cache(job.cache_dir)
    spec = _spec(job)
    names = {scored_model(job, spec).name, *spec.guards}
    try:
        verify_files(((m.name, m.path, m.sha256) for m in job.models if m.name in names),
                     Path(str(job.cache_dir)) / "model-hashes.json")
    except IntegrityError as exc:
        raise WarmFailure(str(exc)) from exc


def _stop(signum: int, _frame: FrameType | None) -> None:
    """A dropped connection or a kill: unwind, so the reference run in flight is killed with
    its process group (engine/sandbox/proc.py) instead of outliving us on the GPU."""
    raise SystemExit(128 + signum)


def main(job_path: Path, jobdir: Path, batch: int) -> int:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop)
    try:
        job = load_job(job_path)
    except ContractError as exc:
        print(f"{FAILED} invalid job description: {exc}", file=sys.stderr, flush=True)
        return 2
    jobdir.mkdir(parents=True, exist_ok=True)
    status = Status(jobdir)  # housekeeping spares the caches while a job directory runs
    status.set("warm-reference")
    try:
        _prepare(job, jobdir)
        warm(job, jobdir, batch, gpu.device_identity(), lambda line: print(line, flush=True))
    except WarmFailure as exc:
        print(f"{FAILED} {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        status.set("done")
    return 0
