"""One evaluation on one box, as the design's steps: prepare, run the harness, fetch, validate.

The harness runs detached on the box, holds the box's lock for its whole life and records its
progress in the job directory, so the bot only starts it and follows files. A dropped connection
costs a reconnect: every call below goes through `Connection.call`, and an evaluation whose
harness is already running (or done) on the box is re-attached, never started twice. Nothing the
engine prints is read here.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from evalbot import engine
from evalbot.config.errors import PipelineError
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.integrity import tree_sha256
from evalbot.engine.contract.job import Job
from evalbot.engine.contract.results import validate
from evalbot.evaluation.reconnect import Connection
from evalbot.remote.box import Box, BoxError, Detached

HARNESS_SRC = Path(engine.__file__).resolve().parent
BUSY = 75  # flock's exit status when the box's lock is held by another evaluation
Progress = Callable[[dict[str, Any]], None]


def job_dir(box_config: BoxConfig, job: Job) -> PurePosixPath:
    return PurePosixPath(box_config.workdir) / "jobs" / job.job_id


def lock_file(box_config: BoxConfig) -> str:
    return str(PurePosixPath(box_config.workdir) / "box.lock")


def with_sandbox(job: Job, box_config: BoxConfig) -> Job:
    """The box's sandbox settings travel in the job; a box without a sandbox user has none."""
    if not box_config.sandbox_user:
        return job
    spec: dict[str, Any] = {"user": box_config.sandbox_user,
                            "launcher": list(box_config.sandbox_launcher)}
    return dataclasses.replace(job, sandbox=spec)


def prepare(box: Box, box_config: BoxConfig, job: Job) -> PurePosixPath:
    """Copy our own harness into a fresh job directory and prove it arrived unaltered."""
    jobdir = job_dir(box_config, job)
    stale = box.run(["test", "-e", str(jobdir)], timeout_s=60)
    if stale.returncode == 0:  # an earlier attempt's directory: keep it, out of the way
        aside = f"{jobdir}.attempt-{int(time.time())}"
        if box.run(["mv", "--", str(jobdir), aside], timeout_s=60).returncode != 0:
            raise PipelineError("cannot move an earlier attempt's job directory aside")
    harness = jobdir / "harness" / "engine"
    box.put(HARNESS_SRC, str(harness))
    expected = tree_sha256(HARNESS_SRC)
    got = box.run([box_config.python, "-m", "engine.contract.integrity", str(harness)],
                  cwd=str(harness.parent), timeout_s=120)
    if got.returncode != 0:  # our own tool's last line: a traceback's cause, never PR output
        last = (got.output.strip().splitlines() or ["no output"])[-1][:200]
        raise PipelineError(f"cannot check the harness copied to the box (exit {got.returncode}: "
                            f"{last}); not running it")
    if got.output.strip() != expected:
        raise PipelineError("the harness copied to the box does not match ours; not running it")
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "job.json"
        local.write_text(with_sandbox(job, box_config).to_json())
        box.put(local, str(jobdir / "job.json"))
    return jobdir


def check_lock(box: Box, box_config: BoxConfig) -> None:
    """Refuse early, with a clear message, when another evaluation holds the box."""
    box.run(["mkdir", "-p", box_config.workdir], timeout_s=60)
    got = box.run(["flock", "-n", "-E", str(BUSY), lock_file(box_config), "true"], timeout_s=60)
    if got.returncode == BUSY:
        raise PipelineError(f"box {box_config.name} is busy: another evaluation holds its lock")
    if got.returncode != 0:
        raise PipelineError(f"box {box_config.name}: cannot take its lock (is flock installed?)")


def start(box: Box, box_config: BoxConfig, jobdir: PurePosixPath) -> Detached:
    """The harness under flock: the lock is held exactly as long as the harness lives."""
    harness = jobdir / "harness"
    argv = ["flock", "-n", "-E", str(BUSY), lock_file(box_config),
            "env", f"PYTHONPATH={harness}", box_config.python, "-m", "engine", "run",
            str(jobdir / "job.json"), "--jobdir", str(jobdir)]
    return box.start_detached(argv, jobdir=str(jobdir))


def attach(box: Box, jobdir: PurePosixPath) -> Detached | None:
    """The run already started for this job directory, if its harness lives or finished."""
    pid = box.run(["cat", str(jobdir / "harness.pid")], timeout_s=60)
    if pid.returncode != 0 or not pid.output.strip().isdigit():
        return None
    run = Detached(str(jobdir), int(pid.output.strip()))
    if box.is_running(run) or read_status(box, jobdir).get("step") == "done":
        return run
    return None


def read_status(box: Box, jobdir: PurePosixPath) -> dict[str, Any]:
    """status.json, or {} while there is none; a dropped connection raises (to reconnect)."""
    got = box.run(["cat", str(jobdir / "status.json")], timeout_s=60)
    if got.returncode != 0:
        return {}
    try:
        doc = json.loads(got.output)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def follow(conn: Connection, run: Detached, progress: Progress | None, poll_s: float,
           timeout_s: float) -> None:
    """Wait for status.json to say done; the harness dying without it is infra's failure."""
    deadline = time.monotonic() + timeout_s
    jobdir = PurePosixPath(run.jobdir)
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        alive = conn.call(lambda: conn.box.is_running(run))
        status = conn.call(lambda: read_status(conn.box, jobdir))
        if status and status != last:
            last = status
            if progress:
                progress(status)
        if status.get("step") == "done":
            _wait_exit(conn, run, poll_s)
            return
        if not alive:
            tail = conn.call(lambda: _log_tail(conn.box, jobdir))
            raise PipelineError("the harness exited without writing its results "
                                f"(last step: {status.get('step', 'none')}){tail}")
        time.sleep(poll_s)
    raise PipelineError(f"the harness did not finish within {timeout_s:.0f} s")


def _wait_exit(conn: Connection, run: Detached, poll_s: float, grace_s: float = 60.0) -> None:
    """`done` is the harness's last write; its process (and with it the box lock) ends a moment
    later. Returning before that would let the next job find the box still locked."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and conn.call(lambda: conn.box.is_running(run)):
        time.sleep(min(poll_s, 0.05))


def _log_tail(box: Box, jobdir: PurePosixPath) -> str:
    got = box.run(["tail", "-n", "1", str(jobdir / "harness.log")], timeout_s=60)
    line = got.output.strip()[-200:] if got.returncode == 0 else ""
    if "No space left on device" in line or "Disk quota exceeded" in line:
        return f": the box's disk is full ({line})"  # the harness's own log, not PR output
    return f": {line}" if line else ""


def fetch(box: Box, jobdir: PurePosixPath, dest: Path) -> dict[str, Any]:
    """Fetch and validate the results file the harness wrote."""
    box.get(str(jobdir / "results.json"), dest)
    try:
        return validate(json.loads(dest.read_text()))
    except (ValueError, ContractError) as exc:
        raise PipelineError(f"results file from the box is invalid: {exc}") from exc


def launch(box: Box, box_config: BoxConfig, job: Job) -> Detached:
    """Re-attach to this job's run when there is one; otherwise lock, prepare and start it."""
    jobdir = job_dir(box_config, job)
    found = attach(box, jobdir)
    if found is not None:
        return found
    check_lock(box, box_config)
    prepare(box, box_config, job)
    return start(box, box_config, jobdir)


def evaluate(box: Box, box_config: BoxConfig, job: Job, out: Path,
             progress: Progress | None = None, poll_s: float = 0.3,
             timeout_s: float = 6 * 3600, connection: Connection | None = None) -> dict[str, Any]:
    """launch -> follow -> fetch, surviving dropped connections; returns the validated results."""
    conn = connection or Connection(box, box_config.name)
    try:
        # launch is safe to repeat: a retry after a drop finds the run the first try started
        run = conn.call(lambda: launch(box, box_config, job))
        follow(conn, run, progress, poll_s, timeout_s)
        return conn.call(lambda: fetch(box, PurePosixPath(run.jobdir), out / "results.json"))
    except BoxError as exc:
        raise PipelineError(f"box {box_config.name}: {exc}") from exc
