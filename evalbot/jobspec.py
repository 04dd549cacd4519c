"""Turn (profile, policy, box, SHAs) into the job description the harness runs."""

from __future__ import annotations

import os
import secrets
import uuid
from pathlib import PurePosixPath

from engine.checks import sha as check_sha
from engine.job import Cell, Correctness, Job, Model, SpeedRun, StoppingRule
from evalbot.config import BoxConfig
from evalbot.policy import Policy
from evalbot.profile import Profile
from evalbot.sequential import EQUIVALENCE_ALPHA, schedule


def make_job(profile: Profile, policy: Policy, box: BoxConfig, base_sha: str, head_sha: str,
             *, seed: int | None = None, merge_base: str | None = None,
             job_id: str | None = None, sd_floors: dict[str, float] | None = None) -> Job:
    """A complete job; the seed is fresh per evaluation unless given (it is recorded).

    `sd_floors` are the box's calibrated per-cell noise (evalbot.calibrate), by cell key.
    """
    check_sha(base_sha, "base")
    check_sha(head_sha, "head")
    speed = profile.speed
    significance = speed.significance if speed.significance is not None else policy.significance
    tolerance = speed.tolerance if speed.tolerance is not None else policy.tolerance
    bounds = schedule(speed.looks, profile.cell_count, policy.alpha)
    rule = StoppingRule(
        looks=list(speed.looks),
        critical=[b.directional for b in bounds],
        sd_floor=box.sd_floor if box.sd_floor is not None else speed.sd_floor,
        significance=significance,
        tolerance=tolerance,
        warmup=speed.warmup,
        budget_s=speed.budget_s,
        alpha=policy.alpha,
        critical_floor=[b.directional_floor for b in bounds],
        equivalence=[b.equivalence for b in bounds],
        equivalence_floor=[b.equivalence_floor for b in bounds],
        equivalence_alpha=EQUIVALENCE_ALPHA,
        family=profile.cell_count,
        sd_floors=dict(sd_floors or {}),
        lock_clocks=box.lock_clocks,
    )
    return Job(
        job_id=job_id or uuid.uuid4().hex[:12],
        profile=profile.name,
        repo=box.repo,
        base_sha=base_sha,
        head_sha=head_sha,
        merge_base=merge_base,
        build_argv=list(profile.build_argv),
        build_timeout_s=profile.build_timeout_s,
        artifacts=list(profile.artifacts),
        models=[Model(m.name, _model_path(box, m.file), m.sha256, m.role, m.namespace)
                for m in profile.models],
        runs=[SpeedRun(r.model, list(r.argv), dict(r.parse),
                       [Cell(r.model, c.metric, c.ctx, anchor=c.anchor) for c in r.cells],
                       r.timeout_s,
                       {"decode": r.decode_tokens}, list(r.witnesses)) for r in profile.runs],
        rule=rule,
        correctness=_correctness(profile, policy, seed),
        env=dict(profile.env),
        cache_dir=str(PurePosixPath(box.workdir) / "cache"),
        box=box.name,
    )


def _model_path(box: BoxConfig, file: str) -> str:
    if os.path.isabs(file) or not box.models_dir:
        return file
    return str(PurePosixPath(box.models_dir) / file)


def _correctness(profile: Profile, policy: Policy, seed: int | None) -> Correctness | None:
    from evalbot.correctness_policy import job_correctness

    if profile.correctness is None:
        return None
    seed = seed if seed is not None else secrets.randbelow(2**31)
    return job_correctness(profile.correctness, policy.correctness, seed)
