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
from evalbot.sequential import critical_values


def make_job(profile: Profile, policy: Policy, box: BoxConfig, base_sha: str, head_sha: str,
             *, seed: int | None = None, merge_base: str | None = None,
             job_id: str | None = None) -> Job:
    """A complete job; the seed is fresh per evaluation unless given (it is recorded)."""
    check_sha(base_sha, "base")
    check_sha(head_sha, "head")
    speed = profile.speed
    significance = speed.significance if speed.significance is not None else policy.significance
    tolerance = speed.tolerance if speed.tolerance is not None else policy.tolerance
    rule = StoppingRule(
        looks=list(speed.looks),
        critical=critical_values(speed.looks, profile.cell_count, policy.alpha),
        sd_floor=box.sd_floor if box.sd_floor is not None else speed.sd_floor,
        significance=significance,
        tolerance=tolerance,
        warmup=speed.warmup,
        budget_s=speed.budget_s,
        alpha=policy.alpha,
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
                       [Cell(r.model, c.metric, c.ctx) for c in r.cells], r.timeout_s,
                       {"decode": r.decode_tokens}) for r in profile.runs],
        rule=rule,
        correctness=_correctness(profile, seed),
        env=dict(profile.env),
        cache_dir=str(PurePosixPath(box.workdir) / "cache"),
    )


def _model_path(box: BoxConfig, file: str) -> str:
    if os.path.isabs(file) or not box.models_dir:
        return file
    return str(PurePosixPath(box.models_dir) / file)


def _correctness(profile: Profile, seed: int | None) -> Correctness | None:
    c = profile.correctness
    if c is None:
        return None
    return Correctness(
        score_argv=list(c.score_argv),
        reference_argv=list(c.reference_argv),
        seed=seed if seed is not None else secrets.randbelow(2**31),
        windows=c.windows,
        window_tokens=c.window_tokens,
        topk=c.topk,
        model=c.model,
        timeout_s=c.timeout_s,
    )
