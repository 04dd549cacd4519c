"""GPU run 53's fourth try (docs/gpu-e2e.md, "Fourth run: profile v7 on a noisy H100"): the shipped
profile v7 (witness rule 3, each witness's last look sized from the job's floor, the room grown
with it) less its correctness section, the sweep cut to the cells up to 4096, on one H100 whose
witness pairs scattered 2.5-4x the profile's floors, as runs 1-2's did (where rule 2's 16-pair last
look called 32.7% of simulated A/As not believed). The A/A is `eval:none`, every covered cell's
2% slowdown ruled out on its witness's clock (decode-128 at its last look, 16 pairs); the hiding
head is caught; an honest +9% decode keeps its tier, confirmed by both decode witnesses; a bench
printing decode x1.10 is rejected by the harness's clock."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from evalbot.engine.contract.results import validate
from evalbot.engine.contract.shared.witness_interval import pair_savings
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "data" / "sparkinfer" / "v7-h100"
POLICY = load_labels(ROOT / "labels.yaml").policy("default")
EVALUATIONS = ("aa-speed", "hide-decode", "decode-cut", "liar-cut")
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_runner import summary  # noqa: E402

from tests.test_sparkinfer_hidden_h100_fixed import assert_every_slowdown_ruled_out  # noqa: E402


def _results(name: str) -> dict:
    results = json.loads((RUN / f"{name}.results.json").read_text())
    validate(results)
    return results


def _witness(results: dict, name: str) -> dict:
    [w] = [w for w in results["witnesses"] if w["name"] == name]
    return w


@pytest.mark.parametrize("name", EVALUATIONS)
def test_each_evaluation_ran_profile_v7_and_regrades_to_what_the_run_published(name: str) -> None:
    results = _results(name)
    assert results["profile_version"] == 7
    assert {w["rule_version"] for w in results["witnesses"] if w["source"] == "witness"} == {3}
    published = json.loads((RUN / f"{name}.verdict.json").read_text())
    verdict = grade(results, POLICY)
    assert verdict["headline"] == published["headline"]
    assert [(c["key"], c["decision"], c["tier"]) for c in verdict["cells"]] == \
        [(c["key"], c["decision"], c["tier"]) for c in published["cells"]]


def test_the_box_was_noisier_than_the_profile_s_floors() -> None:
    """The premise: each A/A witness's pair sd was 2-6x the floor the job carried."""
    results = _results("aa-speed")
    for w in results["witnesses"]:
        if w["source"] == "witness":
            d = pair_savings(w["samples"], need_verified=True)
            assert np.std(d, ddof=1) > 2 * w["sd_floor_s"]


def test_the_a_a_is_unchanged_with_every_slowdown_ruled_out() -> None:
    results = _results("aa-speed")
    assert_every_slowdown_ruled_out(results)
    # decode-128 needed its sized last look: the early ones could not rule 2% out at this noise
    assert len(pair_savings(_witness(results, "decode-128")["samples"], need_verified=True)) == 16


def test_the_hiding_head_is_caught() -> None:
    results = _results("hide-decode")
    verdict = grade(results, POLICY)
    assert summary.judge("caught:decode@128", verdict)
    d = pair_savings(_witness(results, "decode-128")["samples"], need_verified=True)
    assert len(d) >= 3 and (d < 0).all()  # the head slower in every pair on the harness's clock


def test_an_honest_decode_gain_keeps_its_tier_confirmed_by_both_witnesses() -> None:
    verdict = grade(_results("decode-cut"), POLICY)
    assert verdict["headline"] == "eval:M" and summary.judge("tier", verdict)
    decode = [c for c in verdict["cells"] if c["metric"] == "decode"]
    assert len(decode) == 2 and all(
        (c["decision"], c["confirmation"]) == ("improved", "confirmed") for c in decode)


def test_a_printed_decode_gain_is_rejected_by_the_harness_s_clock() -> None:
    verdict = grade(_results("liar-cut"), POLICY)
    assert verdict["headline"] == "eval:REJECT"
    assert {c["key"] for c in verdict["cells"] if c["decision"] == "spoofed"} == \
        {"qwythos-9b/decode@128", "qwythos-9b/decode@4096"}
