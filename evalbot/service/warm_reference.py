"""`evalbot warm-reference`: cache the reference of the profile's whole correctness grid on a box,
once, so that no evaluation there pays for the reference (docs/correctness.md, "Reference").

It reaches the box as an evaluation does (evalbot/evaluation/pipeline.py, local and SSH boxes
alike): our own harness copied into a fresh job directory and checked by its tree hash, then
`python -m engine warm-reference` (engine/harness/warm_reference.py) under the box's lock, so no
evaluation measures while the reference holds the GPU. The harness's progress lines feed a
progress bar. The cache is the evaluations' own (`cache/` of the box's workdir, the harness's
alone), and every batch is cached as soon as it is scored: a failed or interrupted run keeps
what it warmed, and running it again scores only the rest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from evalbot.config.errors import EvalbotError
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.job import Job
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.pipeline import BUSY, check_lock, lock_file, prepare
from evalbot.evaluation.profile import Profile
from evalbot.grading.policy import Policy
from evalbot.remote.box import Box, BoxError

NO_SHA = "0" * 40  # the warm job builds nothing: its SHAs are never fetched
PROGRESS = re.compile(r"^warm-reference: (?P<done>\d+)/(?P<total>\d+) windows\b.*?(?P<eta>ETA .*)?$")
FAILED = "warm-reference failed: "
REPORT = "warm-reference: "


def warm_job(profile: Profile, policy: Policy, box_config: BoxConfig) -> Job:
    """The profile's job as the box's evaluations get it (models, correctness, cache_dir)."""
    if profile.correctness is None:
        raise EvalbotError(f"profile {profile.name} has no correctness section: no reference "
                           "to warm")
    job = make_job(profile, policy, box_config, NO_SHA, NO_SHA, seed=0)
    return dataclasses.replace(job, job_id=f"warm-reference-{job.job_id}")


def run_warm(box: Box, box_config: BoxConfig, job: Job, batch: int, timeout_s: float,
             on_line: Callable[[str], None]) -> tuple[int, str]:
    """Start the harness's warm-up on the box and stream its lines; (exit status, output)."""
    check_lock(box, box_config)
    jobdir = prepare(box, box_config, job)
    argv = ["flock", "-n", "-E", str(BUSY), lock_file(box_config), "env",
            f"PYTHONPATH={jobdir / 'harness'}", box_config.python, "-m", "engine",
            "warm-reference", str(jobdir / "job.json"), "--jobdir", str(jobdir),
            "--batch", str(batch)]
    got = box.run(argv, timeout_s=timeout_s, on_output=on_line)
    return got.returncode, got.output


def failure(box_config: BoxConfig, code: int, output: str) -> str:
    """The one line that says why the warm-up stopped (the harness's own, where it said one)."""
    if code == BUSY:
        return f"box {box_config.name} is busy: an evaluation holds its lock; try again later"
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    said = [ln[len(FAILED):] for ln in lines if ln.startswith(FAILED)]
    why = said[-1] if said else (lines[-1][-300:] if lines else "no output")
    return f"warm-reference on box {box_config.name} failed (exit {code}): {why}"


class Bar:
    """A click progress bar fed by the harness's progress lines; other lines are kept."""

    def __init__(self, label: str, stack: contextlib.ExitStack) -> None:
        self.label, self.stack = label, stack
        self.bar: Any = None
        self.done = 0
        self.reports: list[str] = []

    def line(self, text: str) -> None:
        match = PROGRESS.match(text.strip())
        if match is None:
            if text.startswith(REPORT):
                self.reports.append(text[len(REPORT):])
            return
        if self.bar is None:
            self.bar = self.stack.enter_context(click.progressbar(
                length=int(match["total"]), label=self.label, show_eta=False,
                item_show_func=lambda item: item))
        done = int(match["done"])
        self.bar.update(done - self.done, match["eta"] or "")
        self.done = done


@click.command("warm-reference")
@click.option("--config", "config_file", type=click.Path(path_type=Path), required=True,
              help="the config of the box: its profile, policy and boxes")
@click.option("--box", "box_name", default=None, help="which box (default: the only one)")
@click.option("--batch", type=click.IntRange(min=1), default=16, show_default=True,
              help="short windows per reference process (a long window counts for as many "
                   "as its ids make)")
@click.option("--timeout-h", type=click.FloatRange(min=0, min_open=True), default=24.0,
              show_default=True, help="stop the warm-up after this many hours (it resumes)")
def warm_reference_cmd(config_file: Path, box_name: str | None, batch: int,
                       timeout_h: float) -> None:
    """Cache the reference of the profile's whole correctness grid on a box (resumable)."""
    from evalbot.config.settings import load_config
    from evalbot.evaluation.profile import load_profile
    from evalbot.grading.policy import load_labels
    from evalbot.service.calibrate import config_box
    from evalbot.service.pool import open_box

    config = load_config(config_file)
    box_config = config_box(config.boxes, box_name, "warm-reference")
    job = warm_job(load_profile(config.profile),
                   load_labels(config.labels_file).policy(config.policy), box_config)
    with contextlib.ExitStack() as stack:
        bar = Bar(f"warming the reference on {box_config.name}", stack)
        try:
            box = open_box(box_config)
            stack.callback(box.close)
            code, output = run_warm(box, box_config, job, batch, timeout_h * 3600, bar.line)
        except BoxError as exc:
            raise EvalbotError(f"box {box_config.name}: {exc}; the windows already warmed "
                               "stay cached: run it again to score the rest") from exc
    for report in bar.reports:
        click.echo(report)
    if code != 0:
        raise EvalbotError(failure(box_config, code, output))
