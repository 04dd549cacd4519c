"""The H100's witness noise (GPU run 53, tests/data/sparkinfer/hidden-h100*: 4-5 times the
profile's H200 floors) driven through the real harness on the simulated box and the real grading
(bench/_simbox.py, bench/_h100_noise.py), with the box's calibrated floors as `evalbot calibrate`
stores them: honest A/As are believed unchanged, a slowdown hidden behind main's printed rate is
caught, and a witness the room cuts off its looks leaves its cell not believed, never unchanged."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _h100_noise, _simbox  # noqa: E402
from bench._simbox import POLICY, Head, World  # noqa: E402
from evalbot.engine.harness.steps import _failure  # noqa: E402
from evalbot.engine.measure.speed import SampleFailure  # noqa: E402
from evalbot.evaluation.profile import load_profile  # noqa: E402
from evalbot.grading.grade import grade  # noqa: E402
from evalbot.grading.unexplained_cost import NOT_RULED_OUT, UNTIMED  # noqa: E402

QWYTHOS = "qwythos-9b"
D128 = f"{QWYTHOS}/decode@128"


def _profile(share: float = 0.0):
    """Sparkinfer's shipped profile, its Qwythos runs (the model the H100 timed)."""
    profile = _simbox.one_model(load_profile("sparkinfer"), QWYTHOS)
    return replace(profile, speed=replace(profile.speed, witness_share=share)) if share else profile


def _evaluate(profile, head: Head, seed: int, tmp_path: Path) -> tuple[dict, dict]:
    """(results, verdict) of one evaluation on the H100-noise box, as Evaluator.evaluate."""
    evaluator = _simbox.Evaluator(profile, World("sparkinfer", box="h100"), tmp_path)
    with _simbox.seeded_prompts(seed):
        box = _simbox.SimulatedBox(evaluator.job, evaluator.world, head,
                                   np.random.default_rng(seed), tmp_path)
        failures = []
        try:
            box.run_all()
        except SampleFailure as exc:
            failures.append(_failure("speed", exc.side, exc.kind, exc.message, None))
    results = {**evaluator.header, "cells": [r.to_dict() for r in box.records.values()],
               "witnesses": box.witness_dicts(), "failures": failures}
    return results, grade(results, POLICY)


def test_the_job_carries_the_h100_s_noise_as_its_floor(tmp_path: Path) -> None:
    """The bench's box is what the test says: the fixtures' H100 relative pair sd, 3-5 times the
    H200 fixture's for the decode witnesses, as the calibrated floor, and longer last looks."""
    evaluator = _simbox.Evaluator(_profile(), World("sparkinfer", box="h100"), tmp_path)
    h200 = World("sparkinfer")
    for run in evaluator.job.runs:
        for spec in run.witnesses:
            noisy = evaluator.world.witness(run, spec).pair_sd_s
            assert spec.sd_floor_s == pytest.approx(noisy)
            if spec.name in ("decode-128", "decode-4096"):
                assert 3 < noisy / h200.witness(run, spec).pair_sd_s < 5
                assert spec.looks[-1] > 16
    assert set(_h100_noise.relative_sd()) == {"decode-128", "decode-4096", "prefill-4096"}


@pytest.mark.parametrize("seed", range(8))
def test_an_honest_a_a_is_believed_unchanged_at_the_h100_s_noise(seed: int, tmp_path: Path) -> None:
    results, verdict = _evaluate(_profile(), Head("A/A", honest=False), seed, tmp_path)
    assert verdict["headline"] == "eval:none", [(c["key"], c["decision"]) for c in verdict["cells"]]
    ran = [w for w in results["witnesses"] if w["source"] == "witness" and w["samples"]]
    assert ran and all(w["stopped"] in ("settled", "") for w in ran)


@pytest.mark.parametrize("seed, slowdown", [(0, 1.075), (1, 1.075), (2, 1 / 0.98), (3, 1 / 0.98),
                                           (4, 1.015), (5, 1.015)])
def test_a_slowdown_hidden_behind_main_s_printed_rate_is_caught(seed: int, slowdown: float,
                                                                 tmp_path: Path) -> None:
    """hide-decode's 7.5% (the LM head twice), the 2% threshold and the 1.5% tier step (the
    profile's witness margin), on decode@128, printing main's rate: the cell is not believed,
    the headline no better than inconclusive."""
    head = Head("hide", real={D128: 1 / slowdown}, printed={D128: slowdown}, honest=False)
    _, verdict = _evaluate(_profile(), head, seed, tmp_path)
    [cell] = [c for c in verdict["cells"] if c["key"] == D128]
    assert cell["decision"] in ("unconfirmed", "regressed")
    assert verdict["headline"] in ("eval:inconclusive", "eval:REJECT")


def test_a_witness_the_room_cuts_leaves_its_cell_not_believed(tmp_path: Path) -> None:
    """A witness share too small for the sized looks (0.05 of the measuring): a witness cut
    before a look ruled its cell in leaves the cell not believed (for time), never unchanged;
    the room always reaches the first look, and the cut is at the pair that would not fit."""
    results, verdict = _evaluate(_profile(share=0.05), Head("A/A", honest=False), 0, tmp_path)
    cut = [w for w in results["witnesses"] if w.get("stopped") == "box_time"]
    assert cut
    decisions = {c["key"]: c for c in verdict["cells"]}
    for w in cut:  # cut before any look it reached ruled the slowdown out (else it settled)
        assert len({s["pair"] for s in w["samples"] if not s["dropped"]}) < w["looks"][-1]
        for key in w["cells"]:
            assert decisions[key]["decision"] == "unconfirmed"
            assert decisions[key]["confirmation"] in (NOT_RULED_OUT, UNTIMED)
    assert verdict["headline"] == "eval:inconclusive"
