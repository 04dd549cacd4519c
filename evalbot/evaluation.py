"""One evaluation end to end on the bot side: job -> box -> results -> verdict -> files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalbot import pipeline
from evalbot.calibrate import NoiseStore
from evalbot.config import BoxConfig
from evalbot.errors import PipelineError
from evalbot.grading import grade
from evalbot.jobspec import make_job
from evalbot.policy import Policy
from evalbot.profile import Profile
from evalbot.redact import Redactor
from evalbot.render import render_comment, render_labels
from evalbot.signing import SigningKey, sign_verdict
from evalbot.store import Store
from remote.box import Box


@dataclass(frozen=True)
class Outcome:
    verdict: dict[str, Any]
    comment: str
    out: Path


def evaluate(box: Box, box_config: BoxConfig, profile: Profile, policy: Policy, *,
             repo: str, pr: int | None, base_sha: str, head_sha: str, out: Path,
             store: Store, redact: Redactor, seed: int | None = None,
             progress: pipeline.Progress | None = None,
             signer: SigningKey | None = None) -> Outcome:
    """Queue, lease, run on the box, grade, record and write comment.md / verdict.json."""
    row = store.enqueue(repo, pr, head_sha, policy.ident, base_sha=base_sha)
    worker = f"cli-{box_config.name}"
    leased = store.lease(worker, ttl_s=6 * 3600)
    if leased is None or leased.id != row.id:
        raise PipelineError(f"{store.path}: another job is queued ahead of this one; "
                            "run `evalbot status` and let the service take it")
    noise = NoiseStore(store.path)
    floors = noise.floors(box_config.name, profile.name)  # the box's A/A calibration, if any
    noise.close()
    job = make_job(profile, policy, box_config, base_sha, head_sha, seed=seed, job_id=row.id,
                   sd_floors=floors)
    out.mkdir(parents=True, exist_ok=True)
    try:
        results = pipeline.evaluate(box, box_config, job, out, progress=progress)
    except Exception as exc:
        store.fail(row.id, worker, str(exc), retry=False)
        raise
    verdict = grade(results, policy)
    if signer is not None:
        verdict = sign_verdict(verdict, signer)
    store.finish(row.id, worker, verdict, results)
    comment = render_comment(verdict, redact, results)
    write_outputs(out, verdict, comment)
    return Outcome(verdict, comment, out)


def write_outputs(out: Path, verdict: dict[str, Any], comment: str) -> None:
    (out / "verdict.json").write_text(json.dumps(verdict, indent=2, sort_keys=True) + "\n")
    (out / "comment.md").write_text(comment)
    (out / "labels.txt").write_text(render_labels(verdict))
