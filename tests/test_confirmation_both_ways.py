"""One clock, both ways (issue 53): where the witnesses time every covered cell
(`witness_every_cell`), a cell printed unchanged is believed only once its witness rules out, at
the printed-rate rule's equivalence level split over its looks, a slowdown of the regression
threshold's seconds of that cell's work (evalbot/grading/confirmation.py `both_ways`,
engine/contract/shared/witness_interval.py `rules_out`). Table tests of the bot's judgement, then the
harness's stop (engine/measure/witness.py `settled`) against the bot's judgement on the same
pairs: the bot replays the harness's decision.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from evalbot.engine.contract import witness_spec
from evalbot.engine.contract.shared import witness_interval
from evalbot.engine.measure import witness
from evalbot.grading import confirmation, unexplained_cost
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.report import unconfirmed
from tests.test_confirmation import ROOT, _scripted
from tests.test_grading import C, Doc, results

DEFAULT = load_labels(ROOT / "labels.yaml").policy("default")
KEY = "m/decode@128"
TOKENS = 1000  # main prints 100 tok/s: the cell's work in one witness process is 10 s
THRESHOLD_S = 0.02 * 10.0  # the policy's 2% of it
LOOKS = [3, 5, 8, 16]  # a profile's [3, 5, 8] with witness_every_cell's last look at 16


def _witness(head_extra_s: float, n: int, jitter: float = 0.005, agreement: float = 1.0,
             verified: bool = True, cells: dict[str, int] | None = None) -> dict[str, Any]:
    """A witness of `n` kept pairs: main 12 s, the head `head_extra_s` slower, alternating."""
    samples = []
    for p in range(n):
        j = jitter * (1 if p % 2 else -1)
        samples += [{"pair": p, "side": "base", "seconds": 12.0 + j, "dropped": False,
                     "verified": True, "agreement": 1.0},
                    {"pair": p, "side": "head", "seconds": 12.0 + head_extra_s - j,
                     "dropped": False, "verified": verified, "agreement": agreement}]
    return {"name": "decode-128", "source": "witness", "cells": cells or {KEY: TOKENS},
            "looks": LOOKS, "rule_version": confirmation.WITNESS_RULE, "samples": samples}


def _graded(w: dict[str, Any], every: bool = True, printed: float = 1.0,
            margin: float = 0.0) -> dict[str, Any]:
    """The verdict; `margin`: the rule's recorded witness margin (0: none, the tolerance)."""
    doc = results(Doc([C("m", "decode", 128, printed)], looks=(4, 8)))
    doc["rule"]["witness_every_cell"] = every
    if margin:
        doc["rule"]["witness_margin"] = margin
    doc["witnesses"] = [w]
    return grade(doc, DEFAULT)


def _cell(verdict: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in verdict["cells"] if c["key"] == KEY)


@pytest.mark.parametrize(("witnessed", "decision", "confirmation_"), [
    # a head whose work is slower by the threshold, its rates printed as main's: not believed
    (_witness(THRESHOLD_S, 5), "unconfirmed", unexplained_cost.NOT_RULED_OUT),
    # ... by half of it: the clock cannot tell it from the threshold at 5 pairs, so neither
    (_witness(THRESHOLD_S / 2, 5, jitter=0.05), "unconfirmed", unexplained_cost.NOT_RULED_OUT),
    # an A/A whose witness rules it out at its second look: unchanged
    (_witness(0.0, 5), "neutral", ""),
    # ... at its first look, with 3 pairs
    (_witness(0.0, 3), "neutral", ""),
    # an A/A too noisy to rule it out: not believed (the harness would have measured on)
    (_witness(0.0, 5, jitter=0.4), "unconfirmed", unexplained_cost.NOT_RULED_OUT),
    # cut short between looks (box time): the harness decided nothing at 4 pairs
    (_witness(0.0, 4), "unconfirmed", unexplained_cost.NOT_RULED_OUT),
    # cut short before a judgement: 2 pairs
    (_witness(0.0, 2), "unconfirmed", unexplained_cost.UNTIMED),
    # its head output failed: nothing timed
    (_witness(0.0, 5, verified=False), "unconfirmed", unexplained_cost.UNTIMED),
    # a head that hides 1.2 s of slowdown behind 10% invented ids (their skipped work is up to
    # 10% of main's 12 s): its witness time looks like main's, and is no proof
    (_witness(0.0, 5, agreement=0.9), "unconfirmed", unexplained_cost.NOT_RULED_OUT),
])
def test_an_unchanged_cell_is_believed_only_where_its_witness_rules_out_the_threshold(
        witnessed, decision, confirmation_):
    verdict = _graded(witnessed)
    cell = _cell(verdict)
    assert cell["decision"] == decision, cell
    assert cell.get("confirmation", "") == confirmation_ or decision == "neutral"
    if decision == "neutral":
        assert verdict["headline"] == "eval:none", verdict["reasons"]
    else:  # not believed: the headline no better than inconclusive, and the reason says why
        assert verdict["headline"] == "eval:inconclusive", verdict["reasons"]
        assert verdict["tier"] is None
    if confirmation_ == unexplained_cost.NOT_RULED_OUT:
        assert any(KEY in r and "could not rule out a slowdown of 2%" in r
                   for r in verdict["reasons"]), verdict["reasons"]


def test_a_slowdown_the_printed_rates_show_is_a_regression_not_a_doubt():
    # printed 10% slower, the witness agreeing: regressed, whatever the witness rules out
    verdict = _graded(_witness(1.0, 5), printed=0.9)
    assert _cell(verdict)["decision"] == "regressed"
    assert verdict["headline"] == "eval:REJECT"


def test_another_cells_claimed_saving_cannot_hide_the_slowdown():
    # the witness also times decode@4096, whose printed rates claim 2 s saved a process; the
    # head's witness is 1.8 s faster: 2 s saved there, 0.2 s (the threshold) lost on decode@128
    doc = results(Doc([C("m", "decode", 128, 1.0), C("m", "decode", 4096, 2.0)], looks=(4, 8)))
    doc["rule"]["witness_every_cell"] = True
    doc["witnesses"] = [_witness(-1.8, 5, cells={KEY: TOKENS, "m/decode@4096": 400})]
    verdict = grade(doc, DEFAULT)
    assert _cell(verdict)["decision"] == "unconfirmed", _cell(verdict)
    assert _cell(verdict)["confirmation"] == unexplained_cost.NOT_RULED_OUT


def test_without_witness_every_cell_an_unchanged_cell_rests_on_its_printed_rates():
    # design A: no witness must rule a slowdown out; one that shows the head slower than its
    # printed rates (at 99.9%) still makes the cell not believed, one within its noise does not
    precise = _cell(_graded(_witness(THRESHOLD_S, 5), every=False))
    assert precise["confirmation"] == unexplained_cost.COST
    assert _cell(_graded(_witness(THRESHOLD_S, 5, jitter=0.1), every=False))["decision"] == \
        "neutral"


# --- the harness's stop and the bot's judgement agree on the same pairs --------------------

def _spec(floor_s: float = 0.0, floor_df: int = 0, version: int = confirmation.WITNESS_RULE,
          last: int = 0) -> witness_spec.WitnessSpec:
    spec = witness_spec.parse_witness(
        {"name": "decode-128", "argv": ["x"], "cells": {KEY: 3}, "prompt_tokens": 4,
         "output": {"kind": "ids_line", "prefix": "IDS "}, "output_tokens": 3,
         "pairs": [3, 5, 8], "sd_floor_s": floor_s, "floor_df": floor_df}, "w", {KEY})
    # the claims below stand for TOKENS of the cell's work (the scripted output is 3 ids)
    return confirmation.with_stops(replace(spec, cells={KEY: TOKENS}), DEFAULT.alpha, version,
                                   both_ways=True, last=last)


CLAIMS = {KEY: (0.0, 10.0)}  # printed as main's: no saving claimed, main's 10 s of the cell


def _stop() -> witness.Stop:
    """As the harness builds it for an unchanged-only witness (engine/measure/speed.py)."""
    return replace(witness.stop_for(CLAIMS, [KEY]), unchanged_only=True,
                   believe_above_s=witness_interval.believed_above(CLAIMS, [KEY], DEFAULT.tolerance))


def _record(spec: witness_spec.WitnessSpec, savings: np.ndarray) -> witness.WitnessRecord:
    record = witness.WitnessRecord(spec)
    for p, s in enumerate(savings):
        record.samples += [{"pair": p, "side": side, "seconds": sec, "dropped": False,
                            "verified": True, "agreement": 1.0, "error": ""}
                           for side, sec in (("base", 12.0), ("head", 12.0 - float(s)))]
    return record


@pytest.mark.parametrize(("floor_s", "floor_df", "version", "last"), [
    (0.0, 0, 2, 16), (0.05, 20, 2, 16), (0.05, 2, 2, 16),
    # rule 3, a last look sized past 16 (an H100's floor): its own shares, the same agreement
    (0.05, 11, confirmation.BOTH_WAYS_RULE, 29), (0.0, 0, confirmation.BOTH_WAYS_RULE, 24)])
def test_the_harness_stops_timed_exactly_where_the_bot_rules_the_slowdown_out(
        floor_s, floor_df, version, last):
    spec, stop = _spec(floor_s, floor_df, version, last), _stop()
    assert spec.looks == (3, 5, 8, last) and spec.rule_version == version
    rng = np.random.default_rng(53)
    seen = {True: 0, False: 0}
    for draw in range(300):
        mean = (0.0, -THRESHOLD_S / 2, -THRESHOLD_S)[draw % 3]
        savings = rng.normal(mean, (0.02, 0.08, 0.2)[draw % 4 % 3], last)
        for n in spec.looks[:-1]:
            prefix = _record(spec, savings[:n])
            harness = witness.settled(spec, prefix, n, stop)
            bot = confirmation.judge(prefix.to_dict(), CLAIMS, confirmation.confirm_alpha(
                DEFAULT.alpha, 1), DEFAULT.tolerance)["cells"][KEY]["ruled_out"]
            assert (harness == "timed") == bot, (draw, n, harness, bot)
            seen[bot] += 1
    assert seen[True] > 50 and seen[False] > 50, seen  # both outcomes were put to the test


@pytest.mark.parametrize(("savings", "pairs_run", "believed"), [
    ([0.0, 0.001, -0.001] + [0.0] * 13, 3, True),  # an A/A ruled out at the first look
    ([-THRESHOLD_S] * 16, 16, False),  # the threshold's slowdown: to the last look, not believed
    ([-5.0, -5.1, -4.9] + [-5.0] * 13, 3, False),  # 5 s slower: futility, stopped at once
])
def test_the_bot_replays_what_the_harness_measured(tmp_path, savings, pairs_run, believed):
    spec = _spec()
    launch, _ = _scripted(savings)
    record = witness.measure(spec, lambda arg, side: arg, launch, tmp_path, warmup=0,
                             stop=_stop())
    assert len(record.samples) // 2 == pairs_run
    judged = confirmation.judge(record.to_dict(), CLAIMS, confirmation.confirm_alpha(
        DEFAULT.alpha, 1), DEFAULT.tolerance)
    assert judged["cells"][KEY]["ruled_out"] is believed
    assert (record.settled_by == "timed") is believed


def test_the_comment_says_the_harness_could_not_rule_the_slowdown_out():
    verdict = _graded(_witness(THRESHOLD_S, 5))
    lines = unconfirmed.lines(unconfirmed.groups(verdict))
    assert lines == ["❓ decode @ 128: not believed: the harness's clock could not rule out a "
                     "slowdown of 2% (the regression threshold) of this cell's work"], lines
