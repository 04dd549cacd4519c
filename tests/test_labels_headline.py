"""Every model's label agrees with the headline, for every combination of outcomes (issue 46).

The scored model's correctness and its guard model's, each one of pass, inert, reject,
inconclusive and infra-error, times each model's speed (a tier or none), graded for real: the
results are those the harness records (tests/test_grading.py's factory for the cells, the
correctness sections of tests/test_correctness_policy.py). Before, beside a guard model's
inconclusive the scored model kept its tier label (eval-q35:L under eval:inconclusive).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from evalbot.grading.grade import grade
from evalbot.grading.policy import TIER_ORDER
from tests.test_correctness_deep import _drifted, _inconclusive
from tests.test_correctness_policy import chunks, section
from tests.test_grading import DEFAULT, C, Doc, results

SECTIONS = {  # correctness outcome -> the section the harness records for a model
    "pass": lambda m: section(chunks(32, 256, 0.93, 0, 0), model=m),
    "inert": lambda m: section(chunks(16, 256, 0.93, 0, 0), identical=True, model=m),
    "reject": lambda m: section(chunks(32, 256, 0.93, 2, 28), model=m),
    "inconclusive": _inconclusive,
    "infra-error": lambda m: _drifted(m, 0.73, 1.05),
}
SPEED = {"L": 1.12, "none": 1.0}  # the ratio head/base of the model's one cell
OWN_WORD = {"reject": "REJECT", "inconclusive": "inconclusive", "infra-error": "infra-error"}
CASES = list(itertools.product(SECTIONS, SECTIONS, SPEED, SPEED))


def _graded(scored: str, guard: str, scored_speed: str, guard_speed: str) -> dict[str, Any]:
    doc = results(Doc([C("q35", "decode", 128, SPEED[scored_speed]),
                       C("q36", "decode", 512, SPEED[guard_speed])]))
    doc["correctness"] = SECTIONS[scored]("q35")
    doc["correctness_guards"] = [SECTIONS[guard]("q36")]
    return grade(doc, DEFAULT)


def _expected_headline(outcomes: tuple[str, str], speeds: tuple[str, str]) -> str:
    """The worst correctness outcome of any model, else the best tier, else none."""
    for outcome in ("reject", "infra-error", "inconclusive"):
        if outcome in outcomes:
            return f"eval:{OWN_WORD[outcome]}"
    return "eval:L" if "L" in speeds else "eval:none"


@pytest.mark.parametrize("scored, guard, scored_speed, guard_speed", CASES,
                         ids=["-".join(c) for c in CASES])
def test_every_models_label_agrees_with_the_headline(
        scored: str, guard: str, scored_speed: str, guard_speed: str) -> None:
    verdict = _graded(scored, guard, scored_speed, guard_speed)
    headline = verdict["headline"]
    assert headline == _expected_headline((scored, guard), (scored_speed, guard_speed))
    labels = {m["name"]: m["label"].split(":", 1)[1] for m in verdict["models"]}
    tiered = headline.removeprefix("eval:") in TIER_ORDER
    # no tier label anywhere while the headline has no tier
    assert tiered or not set(labels.values()) & set(TIER_ORDER), (headline, labels)
    for name, outcome, speed in (("q35", scored, scored_speed), ("q36", guard, guard_speed)):
        if outcome in OWN_WORD:  # a model's own label says its own correctness outcome
            assert labels[name] == OWN_WORD[outcome]
        elif tiered:  # both models passed: each shows what its own cells earned
            assert labels[name] == speed
        else:  # passed, under another model's untiered outcome: its tier gives way to the
            # headline's word; without a tier it says none or, where the whole evaluation
            # failed (REJECT, infra-error), the headline's word as every model does there
            word = headline.removeprefix("eval:")
            assert labels[name] == word if speed == "L" else labels[name] in ("none", word)
