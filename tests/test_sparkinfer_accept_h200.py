"""Issue 30's GPU acceptance on the H200, as it ran (scripts/gpu_sparkinfer_witness_acceptance.sh,
docs/gpu-e2e.md): real sparkinfer ba8add3, the synthetic Qwythos-9B, the shipped profile with
only the model pin, the correctness section and the 131072 run removed, `evalbot eval` as the
sandbox user of `evalbot box init`. Each results file regrades to the verdict the run published,
and the witnesses are evalbot's own tool on the stepped handoff protocol."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from evalbot.evaluation.profile import load_profile
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels

DATA = Path(__file__).parent / "data" / "sparkinfer" / "accept-h200"
POLICY = load_labels(Path(__file__).parents[1] / "labels.yaml").policy("default")
TOOL = "{build}/evalbot-out/evalbot-sparkinfer-witness"

# evaluation -> (headline, the cell that carries it, the witness that settled it, how)
EXPECTED = {
    # base = main with the LM head run twice per decode step; head = main: a real +9% decode
    "decode-a": ("eval:M", "qwythos-9b/decode@128", "decode-128", "confirmed"),
    # base = main with int8 prefill projections cut to <= 2048 tokens; head = main
    "prefill-4k": ("eval:M", "qwythos-9b/prefill@4096", "prefill-4096", "confirmed"),
    # head = main whose bench prints its decode rate x1.10, nothing faster
    "liar-decode-110": ("eval:REJECT", "qwythos-9b/decode@128", "decode-128", "contradicted"),
    # second session, rule v2 (profile-v2.yaml): base = main running the batched prefill's
    # attention twice above 8192 tokens; head = main. The 64k witness settles XL, so the 32k one
    # is not run (stopped not_needed) and prefill@32k stays "faster, not confirmed".
    "prefill-32k": ("eval:XL", "qwythos-9b/prefill@65536", "prefill-65536", "confirmed"),
}


def _load(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return (json.loads((DATA / f"{name}.results.json").read_text()),
            json.loads((DATA / f"{name}.verdict.json").read_text()))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_gpu_result_regrades_to_its_published_verdict(name: str) -> None:
    results, published = _load(name)
    verdict = grade(results, POLICY)
    headline, cell_key, witness_name, settled_by = EXPECTED[name]
    assert (verdict["headline"], verdict["kind"], verdict["tier"]) == (
        published["headline"], published["kind"], published["tier"])
    assert verdict["headline"] == headline
    [record] = [w for w in results["witnesses"] if w["name"] == witness_name]
    assert (record["clock"], record["settled_by"], record["steps"] > 0) == (
        "handoff", settled_by, True)
    assert cell_key in record["cells"]
    cell = next(c for c in verdict["cells"] if c["key"] == cell_key)
    assert cell["confirmation"] == settled_by


def test_the_gpu_profile_is_the_shipped_one_but_for_the_models_and_the_removed_sections() -> None:
    ran = load_profile(str(DATA / "profile.yaml"))
    shipped = load_profile("sparkinfer")
    qwythos = [r for r in shipped.runs if r.model == "qwythos-9b"]
    assert ran.build_argv == shipped.build_argv and ran.artifacts == shipped.artifacts
    # issue 33 moved the middle look from 4 to 5 pairs (no verdict before 5, docs/statistics.md);
    # these GPU verdicts were graded under [2, 4, 8] and regrade under the rule they recorded
    assert ran.speed.looks == (2, 4, 8) and shipped.speed.looks == (2, 5, 8)
    assert replace(ran.speed, looks=shipped.speed.looks) == shipped.speed
    assert ran.correctness is None
    assert ran.runs == tuple(r for r in qwythos if 131072 not in {c.ctx for c in r.cells})
    assert all(w.argv[0] == TOOL for r in ran.runs for w in r.witnesses)


def test_the_second_sessions_profile_is_the_shipped_one_but_for_the_same_changes() -> None:
    ran, shipped = load_profile(str(DATA / "profile-v2.yaml")), load_profile("sparkinfer")
    qwythos = [r for r in shipped.runs if r.model == "qwythos-9b"]
    assert (ran.version, ran.speed, ran.build_argv) == (
        shipped.version, shipped.speed, shipped.build_argv)
    assert ran.correctness is None
    assert ran.runs == tuple(r for r in qwythos if 131072 not in {c.ctx for c in r.cells})


def test_an_honest_gain_costs_little_witness_time() -> None:
    # the witness that settles an honest tier reaches its first look and stops there: its box
    # time is a small part of the measuring's (builds and set-up aside)
    for name in ("decode-a", "prefill-4k", "prefill-32k"):
        results, _ = _load(name)
        measured = sum(s["seconds"] for w in results["witnesses"] if w["source"] == "samples"
                       for s in w["samples"])
        witnessed = sum(s["wall_s"] for w in results["witnesses"] if w["source"] == "witness"
                        for s in w["samples"])
        # issue 30: measuring + witnesses <= 1.5x the A/A's measuring. Each measuring stopped at
        # its rule's first deciding look (a negative critical value: no verdict at that look),
        # which no A/A can stop before, so the A/A's measuring is no shorter than this one
        rule = results["rule"]
        first = next(n for n, c in zip(rule["looks"], rule["critical"], strict=True) if c > 0)
        pairs = {len({s["pair"] for s in w["samples"]}) for w in results["witnesses"]
                 if w["source"] == "samples"}
        assert pairs == {first}, (name, pairs, first)
        assert 0 < witnessed <= 0.5 * measured, (name, witnessed, measured)
