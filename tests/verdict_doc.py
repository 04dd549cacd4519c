"""A verdict as the store and the publisher accept it (engine/contract/verdict.py), for tests that
need one without grading a run: the fields they care about, the rest a neutral verdict's."""

from __future__ import annotations

from typing import Any

from evalbot.engine.contract.verdict import Verdict


def verdict_doc(headline: str = "eval:none", kind: str = "neutral", *, base_sha: str = "c" * 40,
                head_sha: str = "d" * 40, job_id: str = "job", **fields: Any) -> dict[str, Any]:
    provenance = {"job_id": job_id, "base_sha": base_sha, "head_sha": head_sha, "policy": "p",
                  **fields.pop("provenance", {})}
    doc = Verdict(kind=kind, headline=headline, labels=(headline,), cells=(),
                  correctness={"decision": "not-scored"}, failures=(),
                  provenance=provenance).to_json()
    return {**doc, **fields}
