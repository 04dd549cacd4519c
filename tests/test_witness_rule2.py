"""The witnesses' rule 2 (issue 46): a floor the box has outgrown cannot confirm a head that saves
nothing, and results judged under rule 1 regrade as they were.

Rule 2 counts the floor for at most the look's pairs less one degrees of freedom, guards it at
the F test's median, and gives each look alpha in proportion to its pairs
(evalbot/grading/confirmation.py). Its error rates on every shipped witness are
bench/witness_quality.py's (tests/test_witness_quality_bench.py runs it short).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from evalbot.config.resources import LABELS_FILE
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract import witness_spec
from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.job import parse_job
from evalbot.engine.contract.shared import witness_interval
from evalbot.engine.contract.shared.witness_interval import Floor
from evalbot.engine.measure import witness
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import load_profile
from evalbot.grading import confirmation
from evalbot.grading.policy import load_labels

DECODE = "m/decode@4096"
STEPS = 1000
MAINS = "".join(f"{witness_spec.STEP}{(7 * i) % 1000}\n" for i in range(STEPS + 1))


def _spec(looks: list[int], sd: float, df: int, version: int) -> witness_spec.WitnessSpec:
    doc = {"name": "w", "argv": ["x"], "cells": {DECODE: STEPS}, "prompt_tokens": 4,
           "steps": STEPS, "output": {"kind": "step_lines"}, "output_tokens": STEPS + 1,
           "clock": "handoff", "pairs": looks, "sd_floor_s": sd, "floor_df": df}
    return confirmation.with_stops(witness_spec.parse_witness(doc, "w", {DECODE}), 0.01, version)


@pytest.mark.parametrize(("pairs", "floor_df", "counted"), [(3, 46, 2), (5, 24, 4), (16, 24, 15),
                                                           (8, 3, 3), (3, 1, 1)])
def test_rule_2_counts_the_floor_for_at_most_the_pairs_and_guards_at_the_median(
        pairs: int, floor_df: int, counted: int) -> None:
    got = confirmation.critical(pairs, 0.002, 0.0005, floor_df, version=2)
    assert got.floor_df == counted
    assert got.lower == pytest.approx(sps.t.isf(0.002, pairs - 1), abs=1e-6)
    assert got.lower_pooled == pytest.approx(sps.t.isf(0.002, counted + pairs - 1), abs=1e-6)
    assert got.upper_pooled == pytest.approx(sps.t.isf(0.0005, counted + pairs - 1), abs=1e-6)
    assert got.guard == pytest.approx(sps.f.isf(0.5, pairs - 1, counted), abs=1e-6)
    old = confirmation.critical(pairs, 0.002, 0.0005, floor_df)  # rule 1: as it always was
    assert (old.floor_df, old.guard) == (0, pytest.approx(sps.f.isf(0.01, pairs - 1, floor_df),
                                                          abs=1e-6))


@pytest.mark.parametrize(("looks", "version", "shares"), [
    ((3, 5, 8), 1, [1 / 3, 1 / 3, 1 / 3]), ((3, 5, 8), 2, [9 / 98, 25 / 98, 64 / 98]),
    ((3, 5, 8, 16), 2, [9 / 354, 25 / 354, 64 / 354, 256 / 354]), ((), 2, [1.0])])
def test_each_look_gets_its_share_of_alpha(looks: tuple[int, ...], version: int,
                                           shares: list[float]) -> None:
    got = confirmation.look_alphas(looks, 0.005, version)
    assert got == pytest.approx([0.005 * s for s in shares])
    # the bot judges the pairs at the share of the last look they reached
    for n, share in zip(looks, shares, strict=False):
        assert confirmation.alpha_at(looks, n, 0.005, version) == pytest.approx(0.005 * share)
        assert confirmation.alpha_at(looks, n + 1, 0.005, version) == pytest.approx(0.005 * share)
    if looks:
        assert confirmation.alpha_at(looks, 2, 0.005, version) == pytest.approx(0.005 * shares[0])


def test_the_job_carries_rule_2_and_the_results_record_it(tmp_path: Path) -> None:
    box = BoxConfig(name="local", kind="local", workdir=str(tmp_path), repo=str(tmp_path))
    policy = load_labels(LABELS_FILE).policy("default")
    job = make_job(load_profile("llamacpp"), policy, box, "a" * 40, "b" * 40)
    assert parse_job(json.loads(job.to_json())) == job  # the contract carries it all
    # the shipped witness: no `work_s` (its span holds an uncredited prefill), so rule 2's looks
    # and one more at twice the last (witness_every_cell), the F guard's df at each
    [spec] = [w for r in job.runs for w in r.witnesses if w.name == "prefill-4k-decode-896"]
    assert (spec.rule_version, spec.looks, spec.pooled_df) == (2, (3, 5, 8, 16, 32),
                                                               (2, 4, 7, 15, 15))
    assert not spec.floor_stale
    record = witness.WitnessRecord(spec).to_dict()
    assert (record["rule_version"], record["floor_df"]) == (2, 15)


def test_a_look_cannot_count_the_floor_for_more_than_it_has() -> None:
    doc = {"name": "w", "argv": ["x"], "cells": {DECODE: 3}, "prompt_tokens": 4,
           "output": {"kind": "ids_line"}, "output_tokens": 3, "pairs": [4, 8],
           "sd_floor_s": 0.05, "floor_df": 5, "pooled_df": [3, 7]}
    with pytest.raises(ContractError, match=r"w\.pooled_df"):
        witness_spec.parse_witness(doc, "w", {DECODE})


def _launch(saves: list[float]) -> witness.Launch:
    launched: list[str] = []

    def launch(side: str, argv: list[str], timeout_s: float, prompt: list[int]) -> witness.Timed:
        pair = len(launched) // 2
        launched.append(side)
        return witness.Timed(True, MAINS, 10.0 - (saves[pair] if side == "head" else 0.0), False)

    return launch


def _status(spec: witness_spec.WitnessSpec, saves: list[float], claim: float,
            tmp_path: Path) -> tuple[str, int]:
    claims = {DECODE: (claim, 8.0)}
    record = witness.measure(spec, lambda a, s: a, _launch(saves), tmp_path, warmup=0,
                             stop=witness.stop_for(claims, [DECODE]))
    judged = confirmation.judge(record.to_dict(), claims, confirmation.confirm_alpha(0.01, 1))
    return judged["cells"][DECODE]["status"], len(record.samples) // 2


def test_a_stale_floor_no_longer_confirms_a_head_that_saves_nothing(tmp_path: Path) -> None:
    # hostile or merely lucky: a head that saves nothing on a box now 3x as noisy as its 46-df
    # floor of 0.01 s. Its first 3 pairs happen to look steady (S 0.008, under the floor: no
    # F test at 2 df can see the box changed) and high. Rule 1 pools them with the floor at
    # 48 df and confirms at the first look; rule 2 counts the floor for 2 df (t at 4 df) and
    # measures on, and the later pairs, at the box's real noise, show nothing.
    saves = [0.034, 0.025, 0.041, -0.03, 0.02, -0.05, 0.01, -0.04]
    old = _status(_spec([3, 5, 8], 0.01, 46, version=1), saves, 0.05, tmp_path)
    new = _status(_spec([3, 5, 8], 0.01, 46, version=2), saves, 0.05, tmp_path)
    assert old == ("confirmed", 3)
    assert new[0] != "confirmed" and new[1] == 8


def test_an_honest_saving_the_floor_holds_for_is_still_confirmed(tmp_path: Path) -> None:
    # a steady 0.05 s saving on the box its floor describes: rule 2 confirms it too
    rng = np.random.default_rng(3)
    saves = list(0.05 + rng.normal(0, 0.01, 8))
    assert _status(_spec([3, 5, 8], 0.01, 46, version=2), saves, 0.05, tmp_path)[0] == \
        "confirmed"


def _old_record(tmp_path: Path) -> dict[str, Any]:
    """A witness record of a harness before rule 2: no `rule_version`."""
    spec = _spec([3, 5, 8], 0.01, 46, version=1)
    saves = [0.034, 0.025, 0.041]
    record = witness.measure(spec, lambda a, s: a, _launch(saves + [0.0] * 5), tmp_path,
                             warmup=0, stop=witness.stop_for({DECODE: (0.05, 8.0)}, [DECODE]))
    doc = record.to_dict()
    doc.pop("rule_version")
    return doc


def test_results_without_a_rule_version_regrade_under_rule_1(tmp_path: Path) -> None:
    doc = _old_record(tmp_path)
    judged = confirmation.judge(doc, {DECODE: (0.05, 8.0)}, 0.005)
    assert judged["cells"][DECODE]["status"] == "confirmed"  # as it was graded then
    assert judged["lo_s"] == pytest.approx(confirmation.interval(
        witness_interval.pair_savings(doc["samples"], True), 10.0, 0.005 / 3,
        Floor(0.01, 46)).lo, rel=1e-9)
