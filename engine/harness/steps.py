"""The harness's steps, top to bottom: build both sides, measure, score, write the results file."""

from __future__ import annotations

import errno
import json
import os
import platform
import shutil
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from .. import __version__
from ..contract.job import Job
from ..contract.results import RESULTS_SCHEMA
from ..measure import gpu
from ..measure.speed import Measurement, SampleFailure
from ..sandbox import safe_io
from ..sandbox import session as sandbox
from ..scoring.correctness import Stage, score, untimed
from ..scoring.tokens import ScoreFailure, speed_tokens
from ..sides.build import Built, build_side
from .stopwatch import Stopwatch

HARNESS_ROOT = Path(__file__).resolve().parents[2]


class Status:
    """status.json in the job directory: the step in progress, so a re-attaching bot can follow."""

    def __init__(self, jobdir: Path) -> None:
        self.path = jobdir / "status.json"

    def set(self, step: str, **extra: Any) -> None:
        # the harness's alone (0600): a run that read the step would know what it is timed for
        doc = {"step": step, "pid": os.getpid(), "time": time.time(), **extra}
        safe_io.write_replace(self.path, json.dumps(doc).encode(), 0o600)


def run_job(job: Job, jobdir: Path) -> dict[str, Any]:
    """Run one evaluation; always returns (and writes) a results document, failures included."""
    jobdir.mkdir(parents=True, exist_ok=True)
    status = Status(jobdir)
    watch = Stopwatch()
    doc: dict[str, Any] = _header(job)
    try:
        _steps(job, jobdir, status, doc, watch)
    except Exception as exc:  # a harness bug must still leave a results file: infra's fault
        message = _DISK_FULL if _is_enospc(exc) else "the harness failed"
        for side, sha in (("base", job.base_sha), ("head", job.head_sha)):  # results stay valid
            doc.setdefault(side, {"sha": sha, "ok": False, "duration_s": 0.0, "cached": False,
                                  "artifacts": {}, "failure": "harness", "saved_s": 0.0})
        doc["failures"].append({"stage": "harness", "side": "harness", "attribution": "infra",
                                "kind": "infra-error", "message": message,
                                "log_tail": traceback.format_exc()[-4000:]})
    return _finish(doc, jobdir, status, watch)


def _steps(job: Job, jobdir: Path, status: Status, doc: dict[str, Any], watch: Stopwatch) -> None:
    failures: list[dict[str, Any]] = doc["failures"]
    job = sandbox.enter(job, jobdir)  # fetch with network, then every engine process sandboxed
    if (caps := sandbox.applied()) is not None:
        doc["box"]["caps"] = caps  # what a build or run of either side may use of the box
    built: dict[str, Built] = {}
    for side, sha in (("base", job.base_sha), ("head", job.head_sha)):
        status.set(f"build-{side}")
        with watch.stage("builds"):
            built[side] = build_side(job, side, sha, jobdir)
        doc[side] = built[side].facts()
    sandbox.seal_trees()  # the artifacts are copied out: no later run reaches the trees
    if not all(b.ok for b in built.values()):
        failures.extend(_build_failures(built))
        return
    try:  # the scored model's ids: the timed decodes run the stream the score run scores
        tokens = speed_tokens(jobdir, job, HARNESS_ROOT)
    except ScoreFailure as exc:  # the tokenizer has the reference's trust: its failure is infra's
        failures.append(_failure("score", "base", exc.kind, exc.message, exc.log))
        return
    status.set("speed")
    measurement = Measurement(job, built, jobdir, HARNESS_ROOT, tokens, stage=watch.stage)
    try:
        with watch.stage("measuring"):  # its warm-ups and witnesses are stages of their own
            measurement.run_all(progress=lambda run, pairs, _: status.set(
                "speed", model=run.model, pairs=pairs, max_pairs=job.rule.looks[-1]))
    except SampleFailure as exc:
        failures.append(_failure("speed", exc.side, exc.kind, exc.message, exc.log))
    finally:
        doc["cells"] = [rec.to_dict() for rec in measurement.records.values()]
        doc["witnesses"] = measurement.witness_dicts()
    if job.correctness is not None and not failures:
        status.set("score")
        device = gpu.device_identity()  # the reference's cache entries are this device's
        try:
            doc["correctness"] = score(job, built, jobdir, HARNESS_ROOT, doc["cells"],
                                       device=device, stage=watch.stage)
            if job.correctness.guards:  # each other model, scored the same way, decides too
                doc["correctness_guards"] = guard_sections(job, built, jobdir, HARNESS_ROOT,
                                                           doc["cells"], device, watch.stage)
        except ScoreFailure as exc:
            side = "base" if exc.side == "reference" else exc.side
            failures.append(_failure("score", side, exc.kind, exc.message, exc.log))
    doc["box"]["gpu_end"] = gpu.gpu_state()


def guard_sections(job: Job, built: dict[str, Built], jobdir: Path, harness: Path,
                   cells: list[dict[str, Any]], device: str,
                   stage: Stage = untimed) -> list[dict[str, Any]]:
    """The correctness section of each guard model: the scored model's recipe, its own model;
    its score processes count in the same correctness stages as the scored model's."""
    assert job.correctness is not None
    return [score(job_of(job, name), built, jobdir, harness, cells, device=device, stage=stage)
            for name in job.correctness.guards]


def job_of(job: Job, model: str) -> Job:
    """The job as one model's correctness section sees it: that model scored, no guards."""
    assert job.correctness is not None
    return replace(job, correctness=replace(job.correctness, model=model, guards=[]))


def _header(job: Job) -> dict[str, Any]:
    return {
        "schema": RESULTS_SCHEMA,
        "job_id": job.job_id,
        "profile": job.profile,
        "profile_version": job.profile_version,
        "harness_version": __version__,
        "merge_base": job.merge_base,
        "box": {
            "name": job.box,
            "gpu_start": gpu.gpu_state(),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "rule": asdict(job.rule),
        "models": [asdict(m) for m in job.models],
        "cells": [],
        "correctness": None,
        "failures": [],
    }


# What a head-side failure means for the verdict; anything else is infrastructure's fault.
_PR_KINDS = {"crashed": "crashed", "timeout": "timeout", "spoofed": "spoofed", "unparsable": "crashed"}


def _failure(stage: str, side: str, kind: str, message: str, log: Path | None) -> dict[str, Any]:
    pr_fault = side == "head" and kind in _PR_KINDS
    return {
        "stage": stage,
        "side": side,
        "attribution": "pr" if pr_fault else "infra",
        "kind": _PR_KINDS[kind] if pr_fault else "infra-error",
        "message": message,
        "log_tail": _tail(log),
    }


def _build_failures(built: dict[str, Built]) -> list[dict[str, Any]]:
    base, head = built["base"], built["head"]
    full = _disk_full(base.artifact_dir.parent.parent)
    note = f" ({_DISK_FULL})" if full else ""
    if not base.ok:  # main must build: otherwise nothing can be said about the PR
        why = f"its build {base.exceeded}" if base.exceeded else f"{base.failure}{note}"
        return [{"stage": "checkout" if base.failure == "checkout" else "build", "side": "base",
                 "attribution": "infra", "kind": "infra-error",
                 "message": f"base failed: {why}", "log_tail": _tail(base.log)}]
    kind = "timeout" if head.failure == "timeout" else "build-failed"
    # A full disk is the box's condition, not the PR's verdict: the profile's disk cap (and the
    # sandbox's per-stage file size limit) is what bounds a PR's writes, and going past it fails
    # the build as the PR's (`exceeded`: its tree is emptied for the next job); a disk that
    # fills below the cap means the box has too little room, and a retry after housekeeping may
    # succeed. Both are measured by the harness, never read from PR output.
    exceeded = head.failure == "exceeded"
    attribution = "infra" if not exceeded and (head.failure == "checkout" or full) else "pr"
    message = f"head failed: its build {head.exceeded}" if exceeded else \
        f"head failed: {head.failure}{note}"
    return [{"stage": "checkout" if head.failure == "checkout" else "build", "side": "head",
             "attribution": attribution, "kind": kind if attribution == "pr" else "infra-error",
             "message": message, "log_tail": _tail(head.log)}]


_DISK_FULL = "the box's disk is full"
_FULL_BELOW = 1 << 20  # bytes free in the job directory's file system that count as full


def _disk_full(jobdir: Path) -> bool:
    try:
        fs = os.statvfs(jobdir)
    except OSError:
        return False
    return fs.f_bavail * fs.f_frsize < _FULL_BELOW


def _is_enospc(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _tail(log: Path | None, limit: int = 4000) -> str:
    if log is None or not log.is_file():
        return ""
    return log.read_bytes()[-limit:].decode("utf-8", errors="replace")


def _finish(doc: dict[str, Any], jobdir: Path, status: Status, watch: Stopwatch) -> dict[str, Any]:
    doc["timing"] = watch.timing()  # writing the file itself comes after: a few milliseconds
    try:
        _write_results(doc, jobdir)
    except OSError as exc:
        if not _is_enospc(exc):
            raise
        # The disk filled up (a build, a log, a cache). The trees and scratch space are
        # disposable once measured: drop them to make room for the results file, and record the
        # full disk so the bot reports it rather than a harness that vanished.
        for name in ("trees", "scratch"):
            shutil.rmtree(jobdir / name, ignore_errors=True)
        doc["failures"].append({"stage": "harness", "side": "harness", "attribution": "infra",
                                "kind": "infra-error", "message": f"{_DISK_FULL}: the results "
                                "file could not be written until the job's trees were removed",
                                "log_tail": ""})
        _write_results(doc, jobdir)  # still full: the bot names the disk from harness.log
    status.set("done", failures=len(doc["failures"]))
    return doc


def _write_results(doc: dict[str, Any], jobdir: Path) -> None:
    # a failed write removes its temporary: no half-written file takes the last bytes
    safe_io.write_replace(jobdir / "results.json",
                          json.dumps(doc, indent=1, sort_keys=True).encode(), 0o600)
