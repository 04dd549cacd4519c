"""Turn (profile, policy, box, SHAs) into the job description the harness runs."""

from __future__ import annotations

import math
import os
import secrets
import uuid
from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import PurePosixPath

from evalbot.config.errors import ConfigError
from evalbot.config.redact import without_credentials
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.checks import sha as check_sha
from evalbot.engine.contract.job import Cell, Correctness, Job, Model, SpeedRun, StoppingRule
from evalbot.engine.contract.shared.witness_interval import Floor
from evalbot.engine.contract.witness_spec import WitnessSpec
from evalbot.evaluation.profile import Profile, ProfileRun
from evalbot.grading import witness_sizing
from evalbot.grading.confirmation import BOTH_WAYS_LAST_LOOK, BOTH_WAYS_RULE, with_stops
from evalbot.grading.policy import TIER_ORDER, Policy
from evalbot.grading.sequential import (
    DIGITS,
    EQUIVALENCE_ALPHA,
    RULE_VERSION,
    fault_sigmas,
    rule_lists,
    schedule,
)
from evalbot.grading.unexplained_cost import cost_critical
from evalbot.store.noise import WITNESS_FLOOR

CALIBRATION_DF = 5  # calibrate's fewest pairs (6) less one: what a stored floor weighs at least


def make_job(profile: Profile, policy: Policy, box: BoxConfig, base_sha: str, head_sha: str,
             *, seed: int | None = None, merge_base: str | None = None,
             job_id: str | None = None, sd_floors: dict[str, float] | None = None,
             floor_df: int = CALIBRATION_DF, witness_df: int | None = None,
             stale_witnesses: Collection[str] = ()) -> Job:
    """A complete job; the seed is fresh per evaluation unless given (it is recorded).

    `sd_floors` are the box's calibrated per-cell noise (evalbot.service.calibrate), by cell key, each
    measured with at least `floor_df` degrees of freedom (the witnesses' with `witness_df`, by
    default the same). The witnesses named in `stale_witnesses` have a floor the box's stored
    pairs refute (evalbot.service.witness_floors): they are not run and confirm nothing.
    """
    check_sha(base_sha, "base")
    check_sha(head_sha, "head")
    speed = profile.speed
    significance = speed.significance if speed.significance is not None else policy.significance
    tolerance = speed.tolerance if speed.tolerance is not None else policy.tolerance
    margin = witness_margin(profile, policy)
    cell_floors, witness_floors = split_floors(sd_floors or {})
    checks = sum(len(w.cells) for r in profile.runs for w in r.witnesses)  # the cells ruled in
    floors = _floors(profile, cell_floors)
    pool_df = 0 if not speed.sd_floor_df else min(
        [speed.sd_floor_df] + ([floor_df] if cell_floors else []))
    bounds = schedule(speed.looks, profile.cell_count, policy.alpha, pool_df=pool_df,
                      version=RULE_VERSION)
    witnesses = [[replace(_stops(_witness_floor(w, witness_floors, witness_df or floor_df),
                                 policy.alpha, margin, checks, speed.witness_every_cell),
                          floor_stale=w.name in stale_witnesses) for w in r.witnesses]
                 for r in profile.runs]
    sized = [(BOTH_WAYS_LAST_LOOK * w.looks[-1], j.looks[-1])
             for r, js in zip(profile.runs, witnesses, strict=True)
             for w, j in zip(r.witnesses, js, strict=True) if j.rule_version >= BOTH_WAYS_RULE]
    rule = StoppingRule(
        looks=list(speed.looks),
        sd_floor=box.sd_floor if box.sd_floor is not None else speed.sd_floor,
        significance=significance,
        tolerance=tolerance,
        warmup=speed.warmup,
        budget_s=speed.budget_s,
        budget_pace_s=speed.budget_pace_s,
        max_budget_s=speed.max_budget_s,
        alpha=policy.alpha,
        equivalence_alpha=EQUIVALENCE_ALPHA,
        family=profile.cell_count,
        sd_floors=floors,
        lock_clocks=box.lock_clocks,
        tier_edges=_tier_edges(profile, policy),
        calibrated=sorted(cell_floors),
        witness_share=witness_sizing.room_share(speed.witness_share, sized, speed.budget_s,
                                                speed.max_budget_s),
        witness_every_cell=speed.witness_every_cell,
        witness_margin=margin,
        regression_rejects=policy.regression_rejects,
        fault_sigmas=fault_sigmas(RULE_VERSION, pool_df),
        **rule_lists(bounds, RULE_VERSION),
    )
    return Job(
        job_id=job_id or uuid.uuid4().hex[:12],
        profile=profile.name,
        profile_version=profile.version,
        repo=without_credentials(box.repo),  # job.json is on the box: no secret in it
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
                       {"decode": r.decode_tokens}, js, r.cost_floor_s, r.cost_floor_df,
                       _cost_critical(r, speed.looks) if speed.witness_every_cell else [])
              for r, js in zip(profile.runs, witnesses, strict=True)],
        rule=rule,
        correctness=_correctness(profile, policy, seed),
        env=dict(profile.env),
        cache_dir=str(PurePosixPath(box.workdir) / "cache"),
        box=box.name,
        limits={stage: dict(caps) for stage, caps in profile.limits.items()},
    )


def _cost_critical(run: ProfileRun, looks: Sequence[int]) -> list[list[float]]:
    """The run's wall-clock critical values per look (engine/contract/job.py `cost_critical`)."""
    floor = Floor(run.cost_floor_s, run.cost_floor_df)
    return [[round(v, DIGITS) for v in (c.lower, c.lower_pooled, c.guard)]
            for c in (cost_critical(n, floor) for n in looks)]


def witness_margin(profile: Profile, policy: Policy) -> float:
    """The slowdown share a witness rules out for a cell printed unchanged to be believed: the
    profile's `speed.witness_margin` (sparkinfer: the policy's smallest tier step), else the
    rule's tolerance. A margin above the tolerance would believe a slowdown the printed-rate rule
    itself calls a regression: refused, naming both."""
    tolerance = profile.speed.tolerance if profile.speed.tolerance is not None \
        else policy.tolerance
    margin = profile.speed.witness_margin
    if margin is None:
        return tolerance
    if margin > tolerance:
        raise ConfigError(f"profile {profile.name}: speed.witness_margin {margin:g} is above the "
                          f"regression threshold {tolerance:g} (policy {policy.name}): a slowdown "
                          "between the two, printed away, would be believed unchanged though the "
                          "rule calls it a regression; set it at most the tolerance")
    return margin


def split_floors(calibrated: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """The box's calibration as (cell key -> sd of the log-ratio, witness name -> sd of a pair's
    saving in seconds): the noise store keeps a witness's under WITNESS_FLOOR + its name."""
    cells = {k: v for k, v in calibrated.items() if not k.startswith(WITNESS_FLOOR)}
    witnesses = {k[len(WITNESS_FLOOR):]: v for k, v in calibrated.items()
                 if k.startswith(WITNESS_FLOOR)}
    return cells, witnesses


def _stops(spec: WitnessSpec, alpha: float, margin: float, checks: int,
           both_ways: bool) -> WitnessSpec:
    """The witness with the bot's critical values; where it times every covered cell, its last
    look sized from the floor it carries (evalbot/grading/witness_sizing.py), for `checks`
    cells ruled in over the job's witnesses."""
    if not (both_ways and spec.work_s > 0):  # nothing to size from: rule 2's looks
        return with_stops(spec, alpha, both_ways=both_ways)
    last = witness_sizing.last_look(spec.looks, Floor(spec.sd_floor_s, spec.floor_df),
                                    margin * spec.work_s, checks, BOTH_WAYS_RULE)
    return with_stops(spec, alpha, BOTH_WAYS_RULE, both_ways=True, last=last)


def _witness_floor(spec: WitnessSpec, calibrated: dict[str, float], floor_df: int) -> WitnessSpec:
    """The witness with the box's own floor where `evalbot calibrate --witnesses` measured one
    (over the profile's, which is another box's)."""
    if spec.name not in calibrated:
        return spec
    sd = calibrated[spec.name]
    if not (math.isfinite(sd) and sd > 0):
        raise ConfigError(f"calibrated floor of witness {spec.name} is {sd}: not a noise "
                          f"measurement; re-run `evalbot calibrate --witnesses` on this box")
    return replace(spec, sd_floor_s=float(sd), floor_df=floor_df)


def _floors(profile: Profile, calibrated: dict[str, float]) -> dict[str, float]:
    """Per-cell floors: the box's calibration over the profile's per-cell values. A floor of 0
    (an A/A of identical samples) would make every interval a point: refused."""
    out = {f"{r.model}/{c.metric}@{c.ctx}": c.sd_floor for r in profile.runs for c in r.cells
           if c.sd_floor > 0}
    for key, sd in calibrated.items():
        if not (math.isfinite(sd) and 0 < sd < 1):
            raise ConfigError(f"calibrated sd floor of {key} is {sd}: not a noise measurement; "
                              f"re-run `evalbot calibrate` on this box")
        out[key] = float(sd)
    return out


def _tier_edges(profile: Profile, policy: Policy) -> dict[str, list[float]]:
    """The policy's tier thresholds per primary cell in log-ratio space, ascending (prefill
    tiers are time-to-first-token reductions g: ln(1/(1-g)))."""
    roles = {m.name: m.role for m in profile.models}
    gains = [policy.tiers[t] for t in reversed(TIER_ORDER)]
    out = {}
    for run in profile.runs:
        for c in run.cells:
            if roles[run.model] != "primary":
                continue
            edges = [-math.log1p(-g) if c.metric == "prefill" else math.log1p(g) for g in gains]
            out[f"{run.model}/{c.metric}@{c.ctx}"] = [round(e, 9) for e in edges]
    return out


def _model_path(box: BoxConfig, file: str) -> str:
    if os.path.isabs(file) or not box.models_dir:
        return file
    return str(PurePosixPath(box.models_dir) / file)


def _correctness(profile: Profile, policy: Policy, seed: int | None) -> Correctness | None:
    from evalbot.grading.correctness_policy import job_correctness

    if profile.correctness is None:
        return None
    seed = seed if seed is not None else secrets.randbelow(2**31)
    return job_correctness(profile.correctness, policy.correctness, seed)
