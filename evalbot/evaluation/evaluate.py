"""One evaluation end to end on the bot side: job -> box -> results -> verdict -> files.

The CLI's one-shot `evaluate` and the service's worker share these pieces: the worker leases
from the queue and retries; `evaluate` runs one job in the foreground. `regrade` re-grades
stored results under a (new) policy without touching a box: grading is pure.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evalbot.audit.signing import SigningKey, sign_verdict
from evalbot.config.errors import PipelineError
from evalbot.config.redact import Redactor
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.verdict import Verdict
from evalbot.evaluation import pipeline
from evalbot.evaluation.jobspec import CALIBRATION_DF, make_job
from evalbot.evaluation.profile import Profile
from evalbot.grading.policy import Policy
from evalbot.remote.box import Box
from evalbot.report.comment import CommentContext, context_for
from evalbot.report.publication import graded, private_dir, public_verdict, write_run
from evalbot.report.render import render_comment
from evalbot.report.witness_floors import stale_witnesses
from evalbot.store.jobs import JobRow, Store
from evalbot.store.noise import NoiseStore


@dataclass(frozen=True)
class Outcome:
    verdict: dict[str, Any]
    comment: str
    out: Path


def evaluate(box: Box, box_config: BoxConfig, profile: Profile, policy: Policy, *,
             repo: str, pr: int | None, base_sha: str, head_sha: str, out: Path,
             store: Store, redact: Redactor, seed: int | None = None,
             progress: pipeline.Progress | None = None,
             signer: SigningKey | None = None, reports_url: str = "",
             links: CommentContext | None = None, calibration: Path | None = None) -> Outcome:
    """Queue, lease, run on the box, grade, record and write the run's published files.

    The comment links under `reports_url` (config `service.reports_url`), or where `links`
    says (the demo: relative paths); main's recent levels come from the store either way.
    The box's calibrated floors come from the store `calibration` names (`evalbot eval
    --config`: the config's, where `evalbot calibrate` put them), else from `store`."""
    row = store.enqueue(repo, pr, head_sha, policy.ident, base_sha=base_sha)
    worker = f"cli-{box_config.name}"
    leased = store.lease(worker, ttl_s=6 * 3600, box=box_config.name)
    if leased is None or leased.id != row.id:
        raise PipelineError(f"{store.path}: another job is queued ahead of this one; "
                            "run `evalbot status` and let the service take it")
    store.set_base(row.id, base_sha)
    calibrated = calibration or store.path
    noise = NoiseStore(calibrated)
    floors = noise.floors(box_config.name, profile.name)  # the box's A/A calibration, if any
    floor_df = noise.degrees(box_config.name, profile.name)
    noise.close()
    job = make_job(profile, policy, box_config, base_sha, head_sha, seed=seed, job_id=row.id,
                   sd_floors=floors, floor_df=floor_df or CALIBRATION_DF,
                   stale_witnesses=stale_witnesses(calibrated, box_config.name, profile.name))
    out.mkdir(parents=True, exist_ok=True)
    try:
        # the raw results are the operator's: under private/, never published
        results = pipeline.evaluate(box, box_config, job, private_dir(out), progress=progress)
    except Exception as exc:
        store.fail(row.id, worker, str(exc), retry=False)
        raise
    verdict = graded(results, policy)  # as it is signed, stored and published
    if signer is not None:
        verdict = sign_verdict(verdict, signer)
    store.finish(row.id, worker, verdict, results)
    context = context_for(store.history(repo=repo), verdict, repo, reports_url)
    if links is not None:
        context = replace(links, main_history=context.main_history)
    comment = record_outputs(out, verdict, lambda v: render_comment(v, redact, context=context,
                                                                  results=results), results)
    return Outcome(verdict, comment, out)


def record_outputs(out: Path, verdict: dict[str, Any],
                   render: Callable[[dict[str, Any]], str] | None = None,
                   results: dict[str, Any] | None = None) -> str:
    """The run's published files (evalbot/report/publication.py); returns the comment."""
    comment = (render or render_comment)(verdict)
    write_run(out, verdict, comment, results)
    return comment


def failure_verdict(job: JobRow, policy: Policy, profile: str, reason: str) -> dict[str, Any]:
    """The verdict of an evaluation that never produced results (box, connection, harness):
    an infra-error, rendered by templates/failure.md.j2 like the harness's own failures, and
    published as they are: its reason as a fixed sentence (the operator's log has the rest)."""
    failure = {"stage": "harness", "side": "harness", "attribution": "infra",
               "kind": "infra-error", "message": reason, "log_tail": ""}
    return public_verdict(Verdict(
        kind="infra-error", headline="eval:infra-error", labels=("eval:infra-error",), cells=(),
        failures=(failure,), correctness={"decision": "not-scored"}, reasons=(reason,),
        provenance={"job_id": job.id, "profile": profile, "base_sha": job.base_sha,
                    "head_sha": job.head_sha, "policy": policy.ident}).to_json())


def regrade(store: Store, policy: Policy, *, repo: str | None = None,
            pr: int | None = None, signer: SigningKey | None = None) -> list[tuple[str, str, str]]:
    """Grade every stored results document again under `policy`; no box is involved.

    Verdicts that change (the signature aside) are replaced, signed with `signer` if given (the
    old one kept as a revision) and marked for publication. Returns (job id, old headline, new
    headline) for each change."""
    changed = []
    for row in store.history(repo=repo, pr=pr):
        if not row["results"]:  # a failure that never produced results: nothing to re-grade
            continue
        verdict = graded(row["results"], policy)
        unsigned = {k: v for k, v in row["verdict"].items() if k != "signature"}
        if json.loads(json.dumps(verdict, sort_keys=True)) == unsigned:
            continue  # unchanged: a signed verdict keeps its signature
        if signer is not None:
            verdict = sign_verdict(verdict, signer)
        if store.regrade(row["job_id"], verdict):
            changed.append((row["job_id"], row["headline"], verdict["headline"]))
    return changed
