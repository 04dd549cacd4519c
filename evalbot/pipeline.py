"""One evaluation on one box, as the design's steps: prepare, run the harness, fetch, validate.

The harness runs detached on the box and records its progress in the job directory, so the bot
only starts it and follows files; nothing the engine prints is read here.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import engine
from engine.checks import ContractError
from engine.integrity import tree_sha256
from engine.job import Job
from engine.results import validate
from evalbot.config import BoxConfig
from evalbot.errors import PipelineError
from remote.box import Box, BoxError, Detached

HARNESS_SRC = Path(engine.__file__).resolve().parent
Progress = Callable[[dict[str, Any]], None]


def job_dir(box_config: BoxConfig, job: Job) -> PurePosixPath:
    return PurePosixPath(box_config.workdir) / "jobs" / job.job_id


def prepare(box: Box, box_config: BoxConfig, job: Job) -> PurePosixPath:
    """Copy our own harness into a fresh job directory and prove it arrived unaltered."""
    jobdir = job_dir(box_config, job)
    harness = jobdir / "harness" / "engine"
    box.put(HARNESS_SRC, str(harness))
    expected = tree_sha256(HARNESS_SRC)
    got = box.run([box_config.python, "-m", "engine.integrity", str(harness)],
                  cwd=str(harness.parent), timeout_s=120)
    if got.returncode != 0 or got.output.strip() != expected:
        raise PipelineError("the harness copied to the box does not match ours; not running it")
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "job.json"
        local.write_text(job.to_json())
        box.put(local, str(jobdir / "job.json"))
    return jobdir


def start(box: Box, box_config: BoxConfig, jobdir: PurePosixPath) -> Detached:
    harness = jobdir / "harness"
    argv = ["env", f"PYTHONPATH={harness}", box_config.python, "-m", "engine", "run",
            str(jobdir / "job.json"), "--jobdir", str(jobdir)]
    return box.start_detached(argv, jobdir=str(jobdir))


def follow(box: Box, run: Detached, progress: Progress | None, poll_s: float,
           timeout_s: float) -> None:
    """Wait for status.json to say done; a missing or unreadable status is not yet an error."""
    deadline = time.monotonic() + timeout_s
    last: dict[str, Any] = {}
    status_file = str(PurePosixPath(run.jobdir) / "status.json")
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "status.json"
        while time.monotonic() < deadline:
            alive = box.is_running(run)
            status = _read_json(box, status_file, local)
            if status and status != last:
                last = status
                if progress:
                    progress(status)
            if status.get("step") == "done":
                return
            if not alive:
                raise PipelineError("the harness exited without writing its results "
                                    f"(last step: {status.get('step', 'none')})")
            time.sleep(poll_s)
    raise PipelineError(f"the harness did not finish within {timeout_s:.0f} s")


def fetch(box: Box, jobdir: PurePosixPath, dest: Path) -> dict[str, Any]:
    """Fetch and validate the results file the harness wrote."""
    box.get(str(jobdir / "results.json"), dest)
    try:
        return validate(json.loads(dest.read_text()))
    except (ValueError, ContractError) as exc:
        raise PipelineError(f"results file from the box is invalid: {exc}") from exc


def evaluate(box: Box, box_config: BoxConfig, job: Job, out: Path,
             progress: Progress | None = None, poll_s: float = 0.3,
             timeout_s: float = 6 * 3600) -> dict[str, Any]:
    """prepare -> start -> follow -> fetch; returns the validated results document."""
    try:
        jobdir = prepare(box, box_config, job)
        run = start(box, box_config, jobdir)
        follow(box, run, progress, poll_s, timeout_s)
        return fetch(box, jobdir, out / "results.json")
    except BoxError as exc:
        raise PipelineError(f"box {box_config.name}: {exc}") from exc


def _read_json(box: Box, remote: str, local: Path) -> dict[str, Any]:
    try:
        box.get(remote, local)
        doc = json.loads(local.read_text())
        return doc if isinstance(doc, dict) else {}
    except (BoxError, ValueError, OSError):
        return {}
