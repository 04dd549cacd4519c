"""A witness's contradiction on a box that showed faults is not called a lie (grading/faulty_box.py).

The fault screen cannot see a fault that struck every sample of main's side (its fastest is a
faulted one too): main's printed rate is then low in every pair, an A/A's head looks faster by
the fault's size, and the harness's witness, which the fault missed, shows no saving. On the
simulated box under the "slow first" stress that made about 1 A/A in 1,000 `spoofed`, a REJECT
(tests/test_fault_screen.py). Where the screen dropped a sample anywhere in the evaluation, such
a cell is not believed and the verdict is inconclusive; on a clean box a lie stays a REJECT, and
a head that runs slow on purpose to be seen as a faulty box still gets no tier.
"""

from __future__ import annotations

from typing import Any

import pytest

from evalbot.grading.faulty_box import FAULTY_BOX, FAULTY_BOX_REASON
from evalbot.grading.grade import grade
from evalbot.report.render import render_comment
from tests.test_grading import DEFAULT, C, Doc, results
from tests.test_wall_time_contradiction import KEY, _real_witness

OTHER = "q35/prefill@512"


def _graded(printed: float, witnessed_head_s: float, faulted_pair: int | None) -> dict[str, Any]:
    """A head printing `printed` x main's decode@128 rate whose witness took `witnessed_head_s`
    (main: 12 s), with the screen's drop of one pair of another cell, or none."""
    doc = results(Doc([C("q35", "decode", 128, printed), C("q35", "prefill", 512, 1.0)]))
    if faulted_pair is not None:
        other = next(c for c in doc["cells"] if f"{c['model']}/{c['metric']}@{c['ctx']}" == OTHER)
        for s in other["samples"]:
            if s["pair"] == faulted_pair:
                s["fault"] = True
    doc["witnesses"] = [_real_witness(witnessed_head_s)]
    return grade(doc, DEFAULT)


def _cell(verdict: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in verdict["cells"] if c["key"] == KEY)


def test_a_lie_on_a_clean_box_is_rejected() -> None:
    verdict = _graded(1.12, 12.0, None)
    assert _cell(verdict)["decision"] == "spoofed"
    assert verdict["headline"] == "eval:REJECT"


@pytest.mark.parametrize("pair", [0, 3])
def test_a_contradiction_on_a_box_that_showed_faults_is_not_believed_not_rejected(pair: int) -> None:
    verdict = _graded(1.12, 12.0, pair)
    cell = _cell(verdict)
    assert (cell["decision"], cell["tier"], cell["confirmation"]) == ("unconfirmed", None, FAULTY_BOX)
    assert verdict["kind"] == "inconclusive" and verdict["headline"] == "eval:inconclusive"
    assert f"{KEY}: {FAULTY_BOX_REASON}" in verdict["reasons"]
    comment = render_comment(verdict)
    assert FAULTY_BOX_REASON in comment and "REJECT" not in comment
    assert "/evalbot rerun" in comment  # measuring again may settle it


def test_a_confirmed_gain_on_a_faulty_box_keeps_its_tier() -> None:
    # the downgrade touches only what a witness contradicted: a real gain still earns its tier
    verdict = _graded(1.12, 12.0 - 1.07, 0)
    assert _cell(verdict)["decision"] == "improved" and verdict["headline"] == "eval:L"
