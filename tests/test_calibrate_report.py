"""What `evalbot calibrate` says: a line per step and pair while it measures, and a warning for
each cell whose floor leaves the policy's thresholds undecidable (evalbot.service.calibrate_report),
on the shipped demo profile and the default policy. The run over SSH that prints them is
tests/test_setup_guide.py."""

from __future__ import annotations

import math
from typing import Any

import pytest

from evalbot.config.errors import EvalbotError
from evalbot.config.resources import LABELS_FILE
from evalbot.config.settings import BoxConfig
from evalbot.evaluation.jobspec import WITNESS_FLOOR
from evalbot.evaluation.profile import load_profile
from evalbot.grading.policy import load_labels
from evalbot.service.calibrate import aa_noise, calibration_job
from evalbot.service.calibrate_report import progress_lines, undecidable

PROFILE = load_profile("demo")
POLICY = load_labels(LABELS_FILE).policy("default")
BOX = BoxConfig(name="gpu-a", kind="local", workdir="/tmp/unused", repo="/tmp/unused")
SHA = "a" * 40
CELLS = [f"{r.model}/{c.metric}@{c.ctx}" for r in PROFILE.runs for c in r.cells]


def _noise(floor: float, pairs: int = 6, one: str | None = None) -> dict[str, tuple[float, int]]:
    """Every cell at the profile's own floor, but `one` (default: every cell) at `floor`."""
    calm = PROFILE.speed.sd_floor
    return {c: (floor if one in (None, c) else calm, pairs) for c in CELLS} | {
        WITNESS_FLOOR + "decode": (5.0, pairs)}  # a witness's floor is seconds: never warned on


def test_the_profiles_own_floor_leaves_every_threshold_decidable() -> None:
    assert undecidable(_noise(PROFILE.speed.sd_floor), PROFILE, POLICY, BOX, SHA) == []


def test_a_53_percent_floor_is_named_with_what_it_costs_and_what_to_do() -> None:
    cell = CELLS[0]
    [found] = undecidable(_noise(0.53, one=cell), PROFILE, POLICY, BOX, SHA)
    assert (found.cell, found.floor, found.pairs) == (cell, 0.53, max(PROFILE.speed.looks))
    assert found.undecided > POLICY.significance and found.decided > found.undecided
    text = found.warning(POLICY)
    assert text.startswith(f"warning: {cell}: noise 53.0% per pair")
    assert f"({found.pairs} pairs)" in text and "no PR comes out neutral" in text
    assert "calibrate again" in text and "speed.looks" in text


@pytest.mark.parametrize("pairs", [6, 12, 40])
def test_the_edge_is_where_the_equivalence_interval_leaves_the_thresholds(pairs: int) -> None:
    """Just inside and just outside ln(1 + s): the warning turns on exactly there."""
    [found] = undecidable(_noise(0.9, pairs, CELLS[0]), PROFILE, POLICY, BOX, SHA)
    u_over_root_n = math.log1p(found.undecided) / 0.9  # u / sqrt(n) of this rule
    edge = min(math.log1p(POLICY.significance), -math.log1p(-POLICY.tolerance)) / u_over_root_n
    assert undecidable(_noise(edge * 0.99, pairs, CELLS[0]), PROFILE, POLICY, BOX, SHA) == []
    assert [u.cell for u in undecidable(_noise(edge * 1.01, pairs, CELLS[0]), PROFILE, POLICY,
                                        BOX, SHA)] == [CELLS[0]]


def test_progress_is_a_line_per_step_and_per_pair_never_a_repeat() -> None:
    lines: list[str] = []
    now = [100.0]
    update = progress_lines(lines.append, 6, clock=lambda: now[0])
    statuses: list[dict[str, Any]] = [
        {"step": "build-base"}, {"step": "build-base"}, {"step": "build-head"},
        {"step": "speed"}, {"step": "speed", "model": "tiny", "pairs": 1},
        {"step": "speed", "model": "tiny", "pairs": 1}, {"step": "speed", "model": "tiny",
                                                         "pairs": 6}, {"step": "done"}]
    for status in statuses:
        now[0] += 7
        update(status)
    assert lines == ["calibrate: building main (7 s)",
                     "calibrate: building main again (head = base) (21 s)",
                     "calibrate: measuring (28 s)", "calibrate: measuring tiny: 1/6 pairs (35 s)",
                     "calibrate: measuring tiny: 6/6 pairs (49 s)", "calibrate: done (56 s)"]


def test_a_floor_of_100_percent_or_more_is_warned_of_not_a_crash() -> None:
    [found] = undecidable(_noise(1.5, one=CELLS[0]), PROFILE, POLICY, BOX, SHA)
    assert found.cell == CELLS[0] and found.floor == 1.5


def _aa(ratios: list[float]) -> dict[str, Any]:
    samples = []
    for pair, ratio in enumerate(ratios):
        samples += [{"pair": pair, "side": "base", "value": 100.0, "dropped": False},
                    {"pair": pair, "side": "head", "value": 100.0 * ratio, "dropped": False}]
    return {"failures": [], "cells": [{"model": "tiny", "metric": "decode", "ctx": 64,
                                       "higher_is_better": True, "samples": samples}]}


def test_calibrate_stores_no_floor_a_job_would_refuse() -> None:
    """A floor of 100% or more (sd of ln(head/base) >= 1) would fail every later job on the box
    (jobspec refuses it): calibrate refuses to store any floor of that run, and says why."""
    assert 0 < aa_noise(_aa([1.0, 1.1, 0.9, 1.05, 0.95, 1.0]))["tiny/decode@64"][0] < 1
    with pytest.raises(EvalbotError, match=r"tiny/decode@64 measured a noise of \d+% per pair"):
        aa_noise(_aa([1.0, 8.0, 0.1, 5.0, 0.2, 1.0]))


def test_calibrate_without_witnesses_runs_none_though_the_profile_witnesses_every_cell() -> None:
    """The demo profile witnesses every cell that did not regress, and an A/A's cells never do:
    `--no-witnesses` (docs/setup.md's calibrate) once ran them all at their profile's looks."""
    assert PROFILE.speed.witness_every_cell
    without = calibration_job(PROFILE, POLICY, BOX, SHA, 6, witnesses=False)
    assert [w for r in without.runs for w in r.witnesses] == []
    assert not without.rule.witness_aa
    every = calibration_job(PROFILE, POLICY, BOX, SHA, 6, witnesses=True)
    named = [w for r in every.runs for w in r.witnesses]
    assert {w.name for w in named} == {w.name for r in PROFILE.runs for w in r.witnesses}
    assert all(w.looks == (6,) for w in named) and every.rule.witness_aa
