"""Grading's own checks of the rule and the cell figures (issue 15), on the table factory."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from evalbot.config.errors import ConfigError, ResultsError
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.shared import replay
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import load_profile
from evalbot.grading.grade import grade
from evalbot.report.details import details
from tests.test_grading import DEFAULT, C, Doc, results

SHA = "a" * 40


def _two_runs_second_cut_by_budget() -> dict[str, Any]:
    doc = results(Doc([C("q35", "decode", 128, 1.0), C("q36", "decode", 128, 1.0, pairs=2)]))
    for cell in doc["cells"]:
        cell["stopped"] = "decided" if cell["model"] == "q35" else "budget"
    return doc


def test_a_run_the_shared_budget_left_below_its_first_look_is_inconclusive() -> None:
    verdict = grade(_two_runs_second_cut_by_budget(), DEFAULT)
    assert verdict["kind"] == "inconclusive" and verdict["headline"] == "eval:inconclusive"
    assert [c["decision"] for c in verdict["cells"]] == ["neutral", "inconclusive"]


def test_a_cell_without_looks_for_another_reason_is_still_an_infra_error() -> None:
    doc = _two_runs_second_cut_by_budget()
    doc["cells"][1]["stopped"] = "last_look"
    assert grade(doc, DEFAULT)["kind"] == "infra-error"


@pytest.mark.parametrize("recompute", [False, True])
def test_a_rule_whose_alpha_controls_nothing_is_refused(recompute: bool) -> None:
    doc = results(Doc([C("q35", "decode", 128, 1.10)]))
    doc["rule"]["alpha"] = 0.5
    if recompute:  # critical values that match alpha 0.5 do not make it a rule
        doc["rule"] = {k: v for k, v in doc["rule"].items()
                       if k not in ("critical_floor", "equivalence", "equivalence_floor")}
    with pytest.raises(ResultsError, match="controls no error"):
        grade(doc, DEFAULT)


@pytest.mark.parametrize("key", ["critical", "critical_floor", "equivalence"])
def test_a_rule_list_shorter_than_its_looks_is_refused_not_a_crash(key: str) -> None:
    doc = results(Doc([C("q35", "decode", 128, 1.10)]))
    doc["rule"][key] = doc["rule"][key][:1]
    with pytest.raises(ResultsError, match=f"rule.{key} has 1 values for 2 looks"):
        grade(doc, DEFAULT)


@pytest.mark.parametrize("where", ["sd_floor", "sd_floors"])
def test_a_zero_floor_is_refused(where: str) -> None:
    doc = results(Doc([C("q35", "decode", 128, 1.025)]))
    if where == "sd_floor":
        doc["rule"]["sd_floor"] = 0.0
    else:
        doc["rule"]["sd_floors"] = {"q35/decode@128": 0.0}
    with pytest.raises(ResultsError, match="not a positive noise"):
        grade(doc, DEFAULT)


def test_make_job_refuses_a_zero_floor_from_calibration() -> None:
    profile = load_profile("llamacpp")
    box = BoxConfig(name="b", kind="local", workdir="/w", repo="/r", trusted=True)
    key = "qwen3-0p6b-synth/decode@0"
    with pytest.raises(ConfigError, match="re-run `evalbot calibrate`"):
        make_job(profile, DEFAULT, box, SHA, SHA, sd_floors={key: 0.0})
    job = make_job(profile, DEFAULT, box, SHA, SHA, sd_floors={key: 0.011}, floor_df=11)
    assert job.rule.sd_floors[key] == 0.011 and job.rule.calibrated == [key]
    assert job.rule.pool_df == 11  # the weaker of the profile's 29 and the calibration's 11


def test_dropped_pairs_count_every_dropped_attempt() -> None:
    doc = results(Doc([C("q35", "decode", 128, 1.0)]))
    cell = doc["cells"][0]
    retries = [{"side": side, "value": 50.0, "pair": 0, "dropped": True}
               for _ in range(3) for side in ("base", "head")]  # pair 0 measured 3 times over
    cell["samples"] = retries + cell["samples"]
    assert grade(doc, DEFAULT)["cells"][0]["dropped_pairs"] == 3


def test_main_and_pr_columns_come_from_the_pairs_that_decided() -> None:
    doc = results(Doc([C("q35", "decode", 128, 1.0)], looks=(4, 8)))
    cell = doc["cells"][0]
    decided_at = cell["looks"][-1]["pairs"]
    assert decided_at == 4  # neutral at the first look; the run measured on for other cells
    for s in cell["samples"]:
        if s["pair"] >= decided_at:
            s["value"] *= 3.0  # pairs the decision never used must not move the columns
    graded = grade(doc, DEFAULT)["cells"][0]
    assert graded["base_median"] == pytest.approx(100.0, rel=0.01)
    assert graded["head_median"] == pytest.approx(100.0, rel=0.01)


def test_significantly_slower_inside_the_tolerance_has_its_own_name() -> None:
    verdict = grade(results(Doc([C("q35", "decode", 128, 0.985)])), DEFAULT)
    cell = verdict["cells"][0]
    assert cell["decision"] == "slower" and cell["interval"] == "simultaneous"
    assert cell["hi"] < 0 and cell["lo"] > -0.02
    assert verdict["headline"] == "eval:none"  # within the tolerance: no REJECT
    assert any("significantly slower by 1.5%" in r for r in verdict["reasons"])


def test_noise_section_names_each_cells_floor_and_its_source() -> None:
    doc = results(Doc([C("q35", "decode", 128, 1.0), C("q35", "decode", 4096, 1.0)]))
    doc["rule"]["sd_floors"] = {"q35/decode@128": 0.002}
    doc["rule"]["calibrated"] = ["q35/decode@128"]
    for cell in doc["cells"]:
        cell["looks"] = [lk.to_dict() for lk in replay.replay(cell, doc["rule"])]
    text = details(grade(copy.deepcopy(doc), DEFAULT), doc)["noise"]
    assert "q35/decode@128: 0.20% (calibrated on this box)" in text
    assert f"q35/decode@4096: {100 * doc['rule']['sd_floor']:.2f}% (the profile's)" in text
    assert "calibrated per cell" not in text


def test_tier_comes_from_the_estimate_not_the_lower_bound() -> None:
    verdict = grade(results(Doc([C("q35", "decode", 128, 1.08, noise=0.01)], looks=(4, 8))),
                    DEFAULT)
    cell = verdict["cells"][0]
    assert cell["decision"] == "improved" and cell["lo"] < 0.06  # the lower bound is S or XS
    assert cell["tier"] == "M" and math.isclose(cell["speedup"], 0.08, rel_tol=0.01)


def test_a_slower_cells_reason_names_the_band_it_was_decided_in_not_the_policys() -> None:
    """The demo's profile sets a 30% tolerance over the policy's 2%: the cells are decided in the
    rule's band, and the reason must say that band (it said "within the 2% tolerance" of a cell
    15% slower, beside a comment that said ±30%)."""
    verdict = grade(results(Doc([C("q35", "decode", 128, 0.85)], tolerance=0.3,
                                significance=0.3)), DEFAULT)
    assert verdict["cells"][0]["decision"] == "slower"
    assert verdict["headline"] == "eval:none"
    [reason] = [r for r in verdict["reasons"] if "significantly slower" in r]
    assert reason.endswith("within the 30% tolerance"), reason
