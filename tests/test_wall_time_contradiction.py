"""Wall times alone never REJECT an honest gain (issue 46).

About 1 honest improvement in 600 was published as `eval:REJECT`: the harness's wall-time check
(engine/measure/spoof.py `unexplained_saving`, a 99.9% test per run) fired by noise, or the run's
samples witness contradicted a cell the real witness had confirmed. Here an honest +12% head whose
run's wall times happen to show almost none of its saving, recorded as the harness records it
(its samples witness carrying the check's reason), is graded for real: with a real witness that
confirmed, it keeps its tier; without one, it is inconclusive with the reason in the comment.
A liar contradicted by a real witness is still REJECTed.
"""

from __future__ import annotations

import json
from typing import Any

from evalbot.engine.measure import spoof
from evalbot.grading.confirmation import WALL_REASON
from evalbot.grading.grade import grade
from evalbot.report.render import render_comment
from tests.test_grading import DEFAULT, C, Doc, results

KEY = "q35/decode@128"
TOKENS = 256  # decode tokens per sample: main at 100 tok/s, the head at 112
# main's and the head's wall seconds per pair: the claimed 0.274 s saving, of which this run's
# noise left about 0.03 s visible (8 pairs, as a busy box can draw once in about 1,000 runs)
SEEN = (0.01, 0.06, 0.02, 0.05, 0.0, 0.04, 0.03, 0.03)


def _samples_witness(doc: dict[str, Any]) -> dict[str, Any]:
    """The run's samples as the harness's witness_dicts writes them, with the reason its
    wall-time check gives (engine/measure/speed.py `_check_claims`)."""
    walls = {(p, "base"): 3.0 for p in range(len(SEEN))}
    walls.update({(p, "head"): 3.0 - d for p, d in enumerate(SEEN)})
    record = next(c for c in doc["cells"] if f"{c['model']}/{c['metric']}@{c['ctx']}" == KEY)
    rates = {(s["pair"], s["side"]): s["value"] for s in record["samples"]}
    checked = [spoof.Sample(p, side, wall, TOKENS / rates[p, side])
               for (p, side), wall in sorted(walls.items())]
    reason = spoof.unexplained_saving(checked)
    assert reason, "the premise: the harness's check fires on this honest run"
    return {"name": "samples:q35", "source": "samples", "clock": "wall", "cells": {KEY: TOKENS},
            "samples": [{"pair": p, "side": side, "seconds": wall, "dropped": False,
                         "verified": False} for (p, side), wall in sorted(walls.items())],
            "wall_reason": reason}


def _real_witness(head_s: float) -> dict[str, Any]:
    """A harness-owned witness of 1000 decode tokens (main: 10 s of its 12 s), verified."""
    samples = []
    for p in range(5):
        j = 0.01 * (1 if p % 2 else -1)
        samples += [{"pair": p, "side": side, "seconds": s, "dropped": False, "verified": True,
                     "agreement": 1.0}
                    for side, s in (("base", 12.0 + j), ("head", head_s - j / 2))]
    return {"name": "decode-128", "source": "witness", "clock": "cpu", "cells": {KEY: 1000},
            "samples": samples}


def _graded(ratio: float, *real: dict[str, Any]) -> dict[str, Any]:
    doc = results(Doc([C("q35", "decode", 128, ratio)]))
    doc["witnesses"] = [_samples_witness(doc), *real]
    return grade(doc, DEFAULT)


def test_an_honest_gain_confirmed_by_its_witness_keeps_its_tier_whatever_the_wall_times() -> None:
    # the witness saw the 1.07 s the printed +12% claims of its work; before, the samples'
    # contradiction turned this cell into `spoofed` (and the harness's check failed the run)
    verdict = _graded(1.12, _real_witness(12.0 - 1.07))
    (cell,) = verdict["cells"]
    assert (cell["decision"], cell["confirmation"]) == ("improved", "confirmed")
    assert verdict["kind"] == "improved" and verdict["headline"] == "eval:L"


def test_an_honest_gain_contradicted_by_wall_times_alone_is_inconclusive_not_reject() -> None:
    verdict = _graded(1.12)  # no harness-owned witness: only the run's own wall times
    (cell,) = verdict["cells"]
    assert cell["decision"] == "unconfirmed" and cell["tier"] is None
    assert verdict["kind"] == "inconclusive" and verdict["headline"] == "eval:inconclusive"
    assert f"{KEY}: {WALL_REASON}" in verdict["reasons"]
    assert f"faster, not confirmed: {WALL_REASON}" in render_comment(verdict)
    # the harness's reason quotes figures from the PR's printed rates: kept in the results only,
    # as no figure of a cell the bot does not believe is published (issue 31)
    assert "claims to save" not in json.dumps(verdict)


def test_a_liar_contradicted_by_a_real_witness_is_still_rejected() -> None:
    # the same printed +12%, but the harness-owned witness saves nothing: REJECT stays
    verdict = _graded(1.12, _real_witness(12.0))
    assert verdict["cells"][0]["decision"] == "spoofed"
    assert verdict["kind"] == "spoofed" and verdict["headline"] == "eval:REJECT"
