"""Real verdicts for the dashboard, signing and reproduce tests: the stub engine measured by the
real harness (engine.harness.steps.run_job), graded as evalbot publishes verdicts
(evalbot.report.publication.graded), recorded through the Store."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from evalbot.config.settings import REPO_ROOT
from evalbot.engine.contract.job import parse_job
from evalbot.engine.harness.steps import run_job
from evalbot.grading.policy import Policy, load_labels
from evalbot.report.publication import graded
from evalbot.store.jobs import Store
from tests.stub_engine import job_doc


def policy() -> Policy:
    return load_labels(REPO_ROOT / "labels.yaml").policy("default")


def measure(repo: Path, base: str, head: str, jobdir: Path, model: str = "m",
            model_file: Path | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(results, verdict) of one evaluation of head against base on the stub engine."""
    doc: dict[str, Any] = job_doc(repo, base, head)
    doc["models"][0]["name"] = model
    if model_file is not None:
        doc["models"][0]["path"] = str(model_file)
        doc["models"][0]["sha256"] = hashlib.sha256(model_file.read_bytes()).hexdigest()
    doc["runs"][0]["model"] = model
    for cell in doc["runs"][0]["cells"]:
        cell["model"] = model
    for witness in doc["runs"][0]["witnesses"]:
        witness["cells"] = {f"{model}/{k.split('/', 1)[1]}": v for k, v in witness["cells"].items()}
    results = run_job(parse_job(doc), jobdir)
    return results, graded(results, policy())


def record(store: Store, repo_name: str, pr: int | None, base: str, head: str,
           results: dict[str, Any], verdict: dict[str, Any], attempt: int = 1) -> str:
    """Queue, lease and finish a job in the store with this verdict; returns the job id."""
    row = store.enqueue(repo_name, pr, head, policy().ident, base_sha=base, attempt=attempt)
    leased = store.lease("test-worker", 600)
    assert leased is not None and leased.id == row.id
    assert store.finish(row.id, "test-worker", verdict, results)
    return row.id
