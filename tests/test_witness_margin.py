"""The witness margin (issue 53): the slowdown, as a share of a cell's work, a witness must rule
out for a cell printed unchanged to be believed. Sparkinfer's and llamacpp's is their policy's
smallest tier step (1.5%: XS 2% to S 3.5%), finer than the 2% threshold, so a slowdown that can
move a tier is not hidden behind main-like printed rates; the demo's stays its 30% tolerance.
One validated setting (`speed.witness_margin`), at most the tolerance; the job records it, the
harness stops on it, the bot judges by it, and the last looks are sized for it."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from evalbot.config.errors import ConfigError
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.job import parse_job
from evalbot.evaluation.jobspec import make_job, witness_margin
from evalbot.evaluation.profile import PROFILES_DIR, load_profile
from evalbot.grading import unexplained_cost, witness_sizing
from evalbot.grading.policy import load_labels
from evalbot.report.comment import witness_lines
from tests.test_confirmation_both_ways import KEY, _cell, _graded, _witness
from tests.test_witness_sizing import _h100_job

ROOT = Path(__file__).resolve().parents[1]
BOOK = load_labels(ROOT / "labels.yaml")
DEFAULT = BOOK.policy("default")
WORK_S = 10.0  # the both-ways table's cell: main's 1000 tokens at 100 tok/s in one process


def _box(tmp_path: Path) -> BoxConfig:
    return BoxConfig(name="b", kind="local", workdir=str(tmp_path), repo=str(tmp_path))


def _job(tmp_path: Path, name: str, policy=DEFAULT):
    return make_job(load_profile(name) if isinstance(name, str) else name, policy,
                    _box(tmp_path), "a" * 40, "b" * 40)


@pytest.mark.parametrize("profile", ["sparkinfer", "llamacpp"])
@pytest.mark.parametrize("policy", sorted(BOOK.policies))
def test_the_shipped_margin_is_the_policy_s_smallest_tier_step(profile: str, policy: str) -> None:
    """The two cannot drift: a tier table edited without the profiles fails here."""
    tiers = sorted(BOOK.policies[policy].tiers.values())
    step = min(b - a for a, b in zip(tiers, tiers[1:], strict=False))
    assert load_profile(profile).speed.witness_margin == pytest.approx(step)
    assert BOOK.policies[policy].smallest_tier_step == pytest.approx(step) == pytest.approx(0.015)


def test_the_job_records_the_margin_and_the_harness_parses_it(tmp_path: Path) -> None:
    job = _job(tmp_path, "sparkinfer")
    parsed = parse_job(json.loads(job.to_json()))
    assert parsed.rule.witness_margin == parsed.rule.margin == 0.015
    assert parsed.rule.tolerance == 0.02  # the printed-rate rule's band is the policy's still


def test_the_demo_keeps_its_margin_at_its_tolerance(tmp_path: Path) -> None:
    """The demo sets no margin: its witnesses rule out its 30% tolerance, as before."""
    assert load_profile("demo").speed.witness_margin is None
    rule = _job(tmp_path, "demo").rule
    assert rule.margin == rule.tolerance == 0.30


def test_a_job_before_the_margin_rules_out_its_tolerance() -> None:
    """Results recorded before the field regrade as they were: the margin is the tolerance."""
    doc = json.loads(make_job(load_profile("sparkinfer"), DEFAULT, BoxConfig(
        name="b", kind="local", workdir="/w", repo="/r"), "a" * 40, "b" * 40).to_json())
    del doc["rule"]["witness_margin"]
    assert parse_job(doc).rule.margin == 0.02
    assert unexplained_cost.witness_margin({"witness_every_cell": True, "tolerance": 0.02}) == 0.02
    assert unexplained_cost.witness_margin({"witness_every_cell": False, "tolerance": 0.02,
                                            "witness_margin": 0.015}) == 0.0


def test_a_job_whose_margin_is_above_its_tolerance_is_refused_by_the_harness() -> None:
    doc = json.loads(make_job(load_profile("sparkinfer"), DEFAULT, BoxConfig(
        name="b", kind="local", workdir="/w", repo="/r"), "a" * 40, "b" * 40).to_json())
    doc["rule"]["witness_margin"] = 0.05
    with pytest.raises(ContractError, match="witness_margin: 0.05 .* tolerance 0.02"):
        parse_job(doc)


def _edited(tmp_path: Path, margin: str, tolerance: str = "") -> Path:
    """sparkinfer.yaml with its margin (and a tolerance of its own) replaced."""
    text = (PROFILES_DIR / "sparkinfer.yaml").read_text()
    assert text.count("  witness_margin: 0.015\n") == 1
    text = text.replace("  witness_margin: 0.015\n", f"  witness_margin: {margin}\n"
                        + (f"  tolerance: {tolerance}\n" if tolerance else ""))
    path = tmp_path / "edited.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("margin, tolerance, message", [
    ("0", "", "0.0 is not a share of a cell's work in (0, 1]"),
    ("-0.01", "", "-0.01 is not a share"),
    ("1.5", "", "1.5 is not a share"),
    ("0.03", "0.02", "0.03 is not a share of a cell's work in (0, 0.02] (the profile's "
                     "tolerance)"),
    ("fast", "", "witness_margin"),
])
def test_a_bad_margin_is_refused_where_the_profile_names_it(tmp_path: Path, margin: str,
                                                            tolerance: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as raised:
        load_profile(str(_edited(tmp_path, margin, tolerance)))
    assert "witness_margin" in str(raised.value)  # where: the key the maintainer must fix


def test_a_margin_above_the_policy_s_tolerance_is_refused_naming_both(tmp_path: Path) -> None:
    """The profile's own range allows 3% (it sets no tolerance); the policy's 2% does not: the
    job is never made, and the service refuses the pair at start (serve.runtime)."""
    profile = load_profile(str(_edited(tmp_path, "0.03")))
    with pytest.raises(ConfigError, match=r"speed.witness_margin 0.03 is above the regression "
                                          r"threshold 0.02 \(policy default\)"):
        witness_margin(profile, DEFAULT)
    with pytest.raises(ConfigError, match="witness_margin"):
        _job(tmp_path, profile)
    looser = replace(DEFAULT, tolerance=0.05)
    assert witness_margin(profile, looser) == 0.03


# --- the rule: a slowdown of the tier step, printed away, is not believed ---------------------

def test_a_tier_step_slowdown_printed_away_is_not_believed_where_2_percent_was_ruled_out() -> None:
    """A head whose witness work is 1.5% slower (0.15 s of the cell's 10 s), printing main's
    rate. Judged by the threshold alone (the rule before the margin, or a results file that
    recorded none), its witness rules 2% out: "unchanged", eval:none. With the margin recorded,
    the same pairs do not rule 1.5% out: not believed, the headline no better than
    inconclusive, and the comment and reasons name the margin."""
    slowed = _witness(0.015 * WORK_S, 8, jitter=0.005)
    before = _graded(slowed)
    assert _cell(before)["decision"] == "neutral" and before["headline"] == "eval:none"
    after = _graded(slowed, margin=0.015)
    cell = _cell(after)
    assert (cell["decision"], cell["confirmation"]) == ("unconfirmed",
                                                        unexplained_cost.NOT_RULED_OUT)
    assert after["headline"] == "eval:inconclusive" and after["tier"] is None
    assert any(KEY in r and "could not rule out a slowdown of 1.5% (the witness margin, below "
               "the 2% regression threshold)" in r for r in after["reasons"]), after["reasons"]
    assert witness_lines(after) == [
        "Witness `decode-128` (the harness's own clock): 8 usable pairs, a 1.5% slowdown not "
        "ruled out"]


def test_an_a_a_rules_the_tier_step_out() -> None:
    verdict = _graded(_witness(0.0, 5, jitter=0.005), margin=0.015)
    assert _cell(verdict)["decision"] == "neutral" and verdict["headline"] == "eval:none"


# --- the pairs it costs, and the room for them ------------------------------------------------

def test_the_last_looks_are_sized_for_the_margin_and_the_room_still_fits(tmp_path: Path) -> None:
    """At the H100's calibrated noise (GPU run 53) each sized witness needs about (2/1.5)^2 the
    pairs it needed for 2%, within MAX_LAST_LOOK; the room grows with them and stays under the
    profile's max_budget_s, so every witness can reach its sized look. At the profile's (H200)
    floors the looks are the rule's 16, as before."""
    profile = load_profile("sparkinfer")
    at_2 = replace(profile, speed=replace(profile.speed, witness_margin=0.02))
    lasts = {w.name: w.looks[-1] for r in _h100_job(tmp_path).runs for w in r.witnesses}
    before = {w.name: w.looks[-1] for r in _h100_job(tmp_path, at_2).runs for w in r.witnesses}
    assert before["decode-128"] > 16 and lasts["decode-128"] > before["decode-128"]
    for name, n in lasts.items():
        assert before[name] <= n <= witness_sizing.MAX_LAST_LOOK, name
        if before[name] > 16:  # sized from the floor: the pairs grow as the margin squared
            assert 1.5 < n / before[name] < 2.0, (name, before[name], n)  # (2/1.5)^2 = 1.78
    rule = _h100_job(tmp_path).rule
    assert rule.witness_share == pytest.approx(1.5 * max(lasts.values()) / 16, abs=1e-3)
    assert rule.witness_share * rule.budget_s < profile.speed.max_budget_s  # not capped
    quiet = _job(tmp_path, "sparkinfer")
    assert {w.looks[-1] for r in quiet.runs for w in r.witnesses} == {16}
    assert quiet.rule.witness_share == 1.5
