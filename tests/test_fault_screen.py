"""Issue 46: the fault screen of rule version 3 (engine/contract/shared/faults.py) and the run it shapes
(engine/contract/shared/run_looks.py), through the real harness on the simulated box and the real grading.

A slow first test in a third of the processes and a silent throttle left a sparkinfer A/A
inconclusive in 97% and 38% of PRs (a +3% head tiered in 5% and 59%): every faulted pair
inflated the cell's sd. The screen drops a pair whose sample is far slower than its side's
fastest; a head's slowness is believed a box fault only when main's processes showed it too.
"""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench import _simbox
from bench._simbox import Head
from evalbot.config.errors import ResultsError
from evalbot.engine.contract.shared import faults, stats
from evalbot.engine.contract.shared.run_looks import RunCell, RunLooks
from evalbot.evaluation.profile import load_profile
from evalbot.grading.faulty_box import FAULTY_BOX_REASON
from evalbot.grading.grade import grade
from evalbot.grading.sequential import schedule

ROOT = Path(__file__).resolve().parents[1]
FLOOR = 0.0035  # sparkinfer's per-pair floor: 0.25% per sample
SLOW = math.log(0.9)


def _clean(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return scale * FLOOR / math.sqrt(2) * rng.standard_normal(shape)


def test_a_slow_first_test_is_found_on_either_side_and_only_it() -> None:
    rng = np.random.default_rng(1)
    x = _clean(rng, 400, 2, 12)  # 400 runs' first cell: [main, head] x 12 pairs
    slow = rng.random((400, 2, 12)) < 1 / 3
    x = x + np.where(slow, SLOW, 0.0)
    found = faults.faulted(x, FLOOR)
    # wrong only where every sample of a side is slow (its fastest is a faulted one too)
    all_slow = slow.all(axis=-1, keepdims=True)
    assert np.array_equal(found | all_slow, slow | all_slow)


@pytest.mark.parametrize("scale,allowed", [(1.0, 0.0), (2.0, 0.005)])
def test_clean_samples_are_not_screened(scale: float, allowed: float) -> None:
    """At the calibrated noise none of 2,000 runs of 7 cells and 24 pairs screens a sample; on
    a box twice as noisy as its floor the screen's width grows with the samples' own sd."""
    rng = np.random.default_rng(2)
    x = _clean(rng, 2000, 7, 2, 24, scale=scale)
    assert faults.faulted(x, np.full(7, FLOOR)).any(axis=(1, 2, 3)).mean() <= allowed


def test_a_box_drifting_across_the_run_is_not_a_fault() -> None:
    rng = np.random.default_rng(3)
    drift = -0.25 * FLOOR / math.sqrt(2) * np.arange(48).reshape(2, 24, order="F")
    x = _clean(rng, 500, 2, 24) + drift  # a quarter sd slower each process, 48 processes
    assert not faults.faulted(x, FLOOR).any()


def _run(head: list[float], main: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """One run of one cell: [main, head] log rates per pair, about a clean level."""
    x = np.array([main, head])[None]  # (cells=1, 2, t)
    return faults.screened_pairs(x, np.array([FLOOR]))


def test_a_head_fault_is_dropped_when_main_showed_it_and_its_own_slowness_is_not() -> None:
    ok = 0.0
    # main's third process ran its first test 10% slow; so did the head's fifth and seventh
    main = [ok, ok, SLOW, ok, ok, ok, ok, ok]
    head = [ok, ok, ok, ok, SLOW, ok, SLOW, ok]
    dropped, faulty = _run(head, main)
    assert faulty and list(np.flatnonzero(dropped)) == [2, 4, 6]
    # the head 6% slower in its fifth and seventh processes, a slowness main never showed: the
    # first is believed (a rare fault strikes the head first half the time), the second is not
    own = math.log(0.94)
    dropped, _ = _run([ok, ok, ok, ok, own, ok, own, ok], [ok] * 8)
    assert list(np.flatnonzero(dropped)) == [4]


def _looks(head_gain: list[float]) -> RunLooks:
    """sparkinfer's rule for one decode cell (looks 2, 5, 8; 9 df; tiers), a head of the given
    gain per pair on a steady box."""
    bounds = schedule([2, 5, 8], 18, 0.01, pool_df=9, version=3)
    edges = tuple(math.log1p(g) for g in (0.02, 0.035, 0.06, 0.10, 0.18))
    run = RunLooks([RunCell("m/decode@128", True, FLOOR, edges)], bounds, 0.02, 0.02,
                   faults.FAULT_SIGMAS)
    rng = np.random.default_rng(4)
    for gain in head_gain:
        base = 100.0 * math.exp(rng.normal(0, FLOOR / 2))
        run.add({"m/decode@128": (base, 100.0 * (1 + gain) * math.exp(rng.normal(0, FLOOR / 2)))},
                False)
        if run.done:
            break
    return run


def test_a_head_fast_in_most_processes_is_judged_on_the_others_too() -> None:
    """The attack on the screen: +6% in most processes, main's speed in the rest, on a steady
    box. Its slow processes are not a fault main showed: beyond the first they stay in its
    pairs, and it is not tiered on its fast ones alone (M) while its mean is S."""
    gains = [0.06, 0.0, 0.06, 0.06, 0.0, 0.06, 0.0, 0.06, 0.06, 0.0, 0.06, 0.06] * 2
    run = _looks(gains)
    assert 1 in run.dropped and {4, 6} & set(run.kept)
    final = stats.final_decision(run.looks["m/decode@128"])
    last = run.looks["m/decode@128"][-1]
    assert final != "improved" or last.tier_lo < 0.06  # never its fast mode's M


def test_an_honest_head_is_tiered_at_its_first_verdict_look_on_a_steady_box() -> None:
    run = _looks([0.03] * 8)
    (look,) = [lk for lk in run.looks["m/decode@128"] if lk.decision == "improved"]
    assert look.pairs == 5 and run.kept == [0, 1, 2, 3, 4] and not run.faulty


def _evaluate(fault: str, head: Head, n: int, seed: int, work: Path) -> list[dict[str, Any]]:
    """n results of the shipped sparkinfer job through the real harness on the simulated box
    with `fault` (the grader's input)."""
    world = _simbox.World("sparkinfer", None, fault)
    evaluator = _simbox.Evaluator(load_profile("sparkinfer"), world, work)
    out = []
    with _simbox.seeded_prompts(seed):
        for i in range(n):
            # a stream per evaluation: its samples do not shift with the pairs the witnesses of
            # the evaluations before it drew (a change of the witness rule alone)
            rng = np.random.default_rng([seed, i])
            box = _simbox.SimulatedBox(evaluator.job, world, head, rng, work)
            box.run_all()
            results = {**evaluator.header, "cells": [r.to_dict() for r in box.records.values()],
                       "witnesses": box.witness_dicts(), "failures": []}
            out.append(results)
    return out


def _screen_blind(results: dict[str, Any]) -> bool:
    """A cell whose every main sample ran slower than every head sample by a fault's size: the
    fault struck each of main's processes, so main's fastest is a faulted one too."""
    for cell in results["cells"]:
        base = [s["value"] for s in cell["samples"] if s["side"] == "base"]
        head = [s["value"] for s in cell["samples"] if s["side"] == "head"]
        if base and head and max(base) < (1 + SLOW / 2) * min(head):
            return True
    return False


@pytest.mark.parametrize("fault", ["slow first", "throttle"])
def test_the_harness_under_box_faults_calls_the_aa_neutral_and_tiers_an_honest_gain(
        fault: str, tmp_path: Path) -> None:
    """The real harness and grading (bench/fault_quality.py's rows, in short): every A/A of 12
    neutral and every +3% head of 6 tiered XS; before the screen, 97% / 38% of A/As were
    inconclusive. The screen's blind spot, a slow first test in every one of main's processes
    and in none of the head's ((1/3)^5 (2/3)^5 a model at 5 pairs: about 1 A/A in 1,000 under
    "slow first"; none of these 12 since each has its own stream), is inconclusive with its
    reason, never a REJECT (grading/faulty_box.py, tests/test_faulty_box.py)."""
    for results in _evaluate(fault, Head("A/A", honest=False), 12, 5, tmp_path):
        verdict = grade(results, _simbox.POLICY)
        if _screen_blind(results):
            assert verdict["kind"] == "inconclusive"
            assert any(FAULTY_BOX_REASON in r for r in verdict["reasons"])
        else:
            assert verdict["kind"] == "neutral"
    decode = {f"qwythos-9b/decode@{c}": 1.03 for c in (128, 4096, 32768, 65536)}
    faster = [grade(r, _simbox.POLICY)
              for r in _evaluate(fault, Head("+3%", real=decode, true_tier="XS"), 6, 6, tmp_path)]
    assert [v["tier"] for v in faster] == ["XS"] * 6


def test_results_whose_drops_are_not_the_screens_are_refused(tmp_path: Path) -> None:
    """The grader replays the screen pair by pair: a results file that keeps a faulted pair, or
    drops a clean one, disagrees with it."""
    results = next(r for r in _evaluate("slow first", Head("A/A", honest=False), 20, 7, tmp_path)
                   if any(s["dropped"] for c in r["cells"] for s in c["samples"]))
    assert grade(results, _simbox.POLICY)["kind"] == "neutral"
    for keep in (True, False):
        forged = copy.deepcopy(results)
        cell = forged["cells"][0]
        pair = next(s["pair"] for s in cell["samples"] if s["dropped"] == keep)
        for c in forged["cells"]:  # every cell of that run: the same processes
            if c["samples"][0]["seq"] == cell["samples"][0]["seq"]:
                for s in c["samples"]:
                    if s["pair"] == pair:
                        s["dropped"] = not keep
        with pytest.raises(ResultsError, match="dropped pairs|disagree"):
            grade(forged, _simbox.POLICY)


def test_the_rule_table_meets_the_bars_under_both_faults() -> None:
    """bench/verdict_quality.py's rows (fixed seed, 1,200 A/As and 600 PRs an effect): A/A false
    <= 1% and inconclusive <= 5%, a +3% head improved >= 95%."""
    sys.path.insert(0, str(ROOT / "bench"))
    import verdict_quality as vq
    for name in ("spark +slow first", "spark +throttle"):
        (sc,) = [s for s in vq.scenarios() if s.name == name]
        f = vq.measure(sc, _simbox.POLICY, 1200, np.random.default_rng(11))
        assert f.false <= 0.01 and f.inconclusive <= 0.05, (name, f.false, f.inconclusive)
        assert f.power[vq.POWER.index(0.03)] >= 0.95, (name, f.power)
