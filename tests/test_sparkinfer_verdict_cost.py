"""The verdict-cost run on an H100 (docs/gpu-e2e.md, "A verdict in minutes"): real sparkinfer
ba8add3, the synthetic Qwythos-9B, the shipped profile (version 3) with one model and without the
131072 run, the reference's whole window grid warmed first (`scripts/gpu_runner/warm.py`),
then an honest head and an A/A, both with the correctness section, through `evalbot eval` in the
bubblewrap sandbox. Each results file regrades to the verdict the run published, its stages add
up to its total, and no evaluation ran the reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalbot.engine.contract.results import validate
from evalbot.evaluation.profile import load_profile
from evalbot.grading.box_time import STAGES
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels

DATA = Path(__file__).parent / "data" / "sparkinfer" / "verdict-cost-h100"
POLICY = load_labels(Path(__file__).parents[1] / "labels.yaml").policy("default")
SHIPPED = Path(__file__).parents[1] / "evalbot" / "profiles" / "sparkinfer.yaml"

# evaluation -> (headline, the cells that are not neutral, with their confirmation)
EXPECTED = {
    # base = main with int8 prefill projections cut to <= 2048 tokens; head = main
    "prefill-4k": ("eval:M", {("qwythos-9b/prefill@4096", "improved", "confirmed")}),
    # head = main with one line of its README changed
    "aa": ("eval:none", set()),
}


def _load(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's results file and the verdict it published."""
    results, verdict = (json.loads((DATA / f"{name}.{kind}.json").read_text())
                        for kind in ("results", "verdict"))
    return results, verdict


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_result_regrades_to_its_published_verdict(name: str) -> None:
    results, published = _load(name)
    validate(results)
    verdict = grade(results, POLICY)
    headline, moved = EXPECTED[name]
    assert (verdict["headline"], verdict["kind"], verdict["tier"]) == (
        published["headline"], published["kind"], published["tier"])
    assert verdict["headline"] == headline
    assert {(c["key"], c["decision"], c.get("confirmation")) for c in verdict["cells"]
            if c["decision"] != "neutral"} == moved


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_stages_add_up_and_the_warmed_reference_ran_nothing(name: str) -> None:
    results, _ = _load(name)
    timing = results["timing"]
    assert set(timing["stages"]) == set(STAGES)
    assert abs(sum(timing["stages"].values()) - timing["total_s"]) <= 1.0
    corr = results["correctness"]
    # every window the seed picked came from the warmed cache, on this GPU's key
    assert corr["reference"]["scored"] == 0
    assert corr["reference"]["cached"] == len(corr["windows"])
    assert corr["reference"]["device"].startswith("gpu NVIDIA H100")
    # so the reference's stage is cache reads only, a small share of either side's scoring
    assert timing["stages"]["correctness_reference"] < 0.05 * timing["stages"]["correctness_base"]
    assert corr["stopped"] == "identical"


def test_the_run_used_the_shipped_correctness_section() -> None:
    ran, shipped = load_profile(DATA / "profile.yaml"), load_profile(SHIPPED)
    # version 4 changed the speed section's budget only (issue 46), version 5 the runs' cost
    # floors only (issue 53), versions 6 to 9 its witnesses and cells (issue 53): the correctness
    # section is v3's
    assert ran.version == 3 and shipped.version == 9
    assert ran.correctness is not None and shipped.correctness is not None
    for field in ("windows", "window_tokens", "looks", "long_windows", "long_window_tokens",
                  "long_score_tokens", "long_scored", "topk", "score_argv"):
        assert getattr(ran.correctness, field) == getattr(shipped.correctness, field), field
    results, _ = _load("aa")
    short = [c for c in results["correctness"]["chunks"] if c["kind"] == "short"]
    deep = [c for c in results["correctness"]["chunks"] if c["kind"] == "deep"]
    assert (len(short), len(deep)) == (shipped.correctness.windows,
                                       8 * shipped.correctness.long_windows)


def test_the_warm_up_covered_the_whole_grid() -> None:
    """warm.txt: the harness's own report of the warm-up, the grid's windows all scored once."""
    lines = (DATA / "warm.txt").read_text().splitlines()
    last = [ln for ln in lines if ln.startswith("warm-reference: qwythos-9b:")]
    assert last and "249 windows scored, 0 were cached" in last[-1]
    assert lines[-1].startswith("warm-reference: done: 249 windows of 1 model cached on gpu")
