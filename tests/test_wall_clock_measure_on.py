"""A run whose wall clock cannot rule its unwitnessed cells in measures on (issue 53): the real
harness (engine/measure/speed.py) on the simulated box of bench/_simbox.py at the shipped
sparkinfer profile's Qwen3.6 run, graded by the real grading. Its prefill@16384 and @32768 have
no witness: their run's wall clock alone holds them, and a printed slowdown buys no cover there
(engine/contract/shared/wall_clock.py)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _simbox  # noqa: E402
from bench._simbox import Head  # noqa: E402
from evalbot.engine.contract.checks import ContractError  # noqa: E402
from evalbot.engine.contract.job import parse_job  # noqa: E402
from evalbot.grading.grade import grade  # noqa: E402
from evalbot.grading.unexplained_cost import CAPPED  # noqa: E402

QWEN36 = "qwen3.6-35b-a3b"
HIDDEN = f"{QWEN36}/prefill@16384"
WALL_ONLY = {HIDDEN, f"{QWEN36}/prefill@32768"}


def _evaluate(head: Head, seed: int, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    profile = _simbox.one_model(_simbox.shipped("sparkinfer"), QWEN36)
    evaluator = _simbox.Evaluator(profile, _simbox.World("sparkinfer"), tmp_path)
    box = _simbox.SimulatedBox(evaluator.job, evaluator.world, head,
                               np.random.default_rng(seed), tmp_path)
    with _simbox.seeded_prompts(seed):
        box.run_all()
    results = {**evaluator.header, "cells": [r.to_dict() for r in box.records.values()],
               "witnesses": box.witness_dicts(), "failures": []}
    return results, grade(results, _simbox.POLICY)


def _pairs(results: dict[str, Any]) -> int:
    [samples] = [w for w in results["witnesses"] if w["source"] == "samples"]
    return len({s["pair"] for s in samples["samples"] if not s["dropped"]})


def _offset() -> Head:
    """prefill@16384 really 2% slower, printed as main's; every other cell of its run printed 1%
    slower than it runs (main's speed): bench/_hiding_heads.py's threshold offset."""
    [run] = _simbox.one_model(_simbox.shipped("sparkinfer"), QWEN36).runs
    keys = [f"{QWEN36}/{c.metric}@{c.ctx}" for c in run.cells]
    return Head("offset", real={HIDDEN: 0.98},
                printed={k: 1 / 0.98 if k == HIDDEN else 0.99 for k in keys}, honest=False)


def _cells(verdict: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["key"]: (c["decision"], c.get("confirmation", "")) for c in verdict["cells"]}


def test_the_job_carries_each_run_s_wall_clock_critical_values(tmp_path: Path) -> None:
    profile = _simbox.one_model(_simbox.shipped("sparkinfer"), QWEN36)
    job = _simbox.Evaluator(profile, _simbox.World("sparkinfer"), tmp_path).job
    [run] = job.runs
    assert len(run.cost_critical) == len(job.rule.looks)
    # t own at 1 df, t pooled at the floor's df + 1, the F guard: each shrinks with the pairs
    assert run.cost_critical[0][0] == pytest.approx(6.314, abs=1e-3)
    assert all(a[1] > b[1] for a, b in pairwise(run.cost_critical))
    assert parse_job(json.loads(job.to_json())).runs[0].cost_critical == \
        run.cost_critical


@pytest.mark.parametrize(("value", "says"), [
    ([[6.3, 2.0]], "one [t own, t pooled, guard]"),
    ([[6.3, 2.0, -1.0]] * 3, "one [t own, t pooled, guard]"),
    ("6.3", "one [t own, t pooled, guard]"),
    ([[6.3, 2.0, 9.0]], "one per look [2, 5, 8]"),
])
def test_a_job_s_malformed_critical_values_are_refused_by_name(tmp_path: Path, value: Any,
                                                               says: str) -> None:
    profile = _simbox.one_model(_simbox.shipped("sparkinfer"), QWEN36)
    doc = json.loads(_simbox.Evaluator(profile, _simbox.World("sparkinfer"), tmp_path)
                     .job.to_json())
    doc["runs"][0]["cost_critical"] = value
    with pytest.raises(ContractError, match=r"runs\[0\]\.cost_critical") as raised:
        parse_job(doc)
    assert says in str(raised.value)


def test_an_a_a_stops_at_its_first_look_its_wall_clock_ruling_its_cells_in(
        tmp_path: Path) -> None:
    results, verdict = _evaluate(Head("A/A"), 1, tmp_path)
    assert _pairs(results) == 2
    assert {k: _cells(verdict)[k][0] for k in WALL_ONLY} == dict.fromkeys(WALL_ONLY, "neutral")


def test_an_offset_past_the_margin_is_not_believed_at_its_first_look(tmp_path: Path) -> None:
    """The printed 1% no longer covers the hidden 2%: the run's wall clock cannot rule the cell
    in, and its mean unaccounted time (2% of a 35 s fill) is already past the cell's 1.5%
    margin, which more pairs would only confirm: the run stops, the cell not believed."""
    results, verdict = _evaluate(_offset(), 1, tmp_path)
    assert _pairs(results) == 2
    decision, confirmation = _cells(verdict)[HIDDEN]
    assert decision == "unconfirmed" and confirmation in CAPPED
    assert verdict["headline"] == "eval:inconclusive"


def test_an_honest_head_printed_slower_stops_at_its_first_look(tmp_path: Path) -> None:
    """Every cell 1% slower, printed so: its printed slowdowns buy no cover, so the wall clock
    cannot tell its real 1% of 16384's and 32768's fills from a hidden slowdown of 16384's
    alone, and the mean is past 16384's margin: more pairs would not rule it in (docs/
    statistics.md 9e), so they are not measured."""
    [run] = _simbox.one_model(_simbox.shipped("sparkinfer"), QWEN36).runs
    head = Head("honest -1%", real={f"{QWEN36}/{c.metric}@{c.ctx}": 0.99 for c in run.cells})
    results, verdict = _evaluate(head, 1, tmp_path)
    assert _pairs(results) == 2
    assert _cells(verdict)[HIDDEN][0] == "unconfirmed"


def test_without_the_critical_values_the_harness_stops_as_decided(tmp_path: Path) -> None:
    """A job from before them (no `cost_critical`): the run stops at its first look, as it did,
    and the grader, which judges whatever pairs came, does not believe the offset's cell."""
    profile = _simbox.one_model(_simbox.shipped("sparkinfer"), QWEN36)
    evaluator = _simbox.Evaluator(profile, _simbox.World("sparkinfer"), tmp_path)
    evaluator.job = replace(evaluator.job, runs=[replace(r, cost_critical=[])
                                                 for r in evaluator.job.runs])
    box = _simbox.SimulatedBox(evaluator.job, evaluator.world, _offset(),
                               np.random.default_rng(1), tmp_path)
    with _simbox.seeded_prompts(1):
        box.run_all()
    results = {**evaluator.header, "cells": [r.to_dict() for r in box.records.values()],
               "witnesses": box.witness_dicts(), "failures": []}
    assert _pairs(results) == 2
    assert _cells(grade(results, _simbox.POLICY))[HIDDEN][0] == "unconfirmed"


def _run_doc(head_s: dict[str, list[float]], base_s: float | dict[str, float] = 10.0,
             hidden: list[float] | None = None) -> tuple[dict, dict]:
    """A samples witness of cells of 1000 tokens each, main printing `base_s` seconds a cell (one
    for all, or per cell); the head's printed seconds per pair as given; every process 5 s
    outside the work, the head's `hidden[pair]` seconds more."""
    main = base_s if isinstance(base_s, dict) else dict.fromkeys(head_s, base_s)
    pairs = len(next(iter(head_s.values())))
    extra = hidden or [0.0] * pairs
    records = {k: {"higher_is_better": True, "samples": [
        {"pair": p, "side": side, "dropped": False, "value": 1000 / s}
        for p, h in enumerate(hs) for side, s in (("base", main[k]), ("head", h))]}
        for k, hs in head_s.items()}
    witness = {"cells": dict.fromkeys(head_s, 1000), "samples": [
        {"pair": p, "side": side, "dropped": False,
         "seconds": 5.0 + sum(hs[p] if side == "head" else main[k] for k, hs in head_s.items())
         + (extra[p] if side == "head" else 0.0)}
        for p in range(pairs) for side in ("base", "head")]}
    return witness, records


@pytest.mark.parametrize(("main_s", "hidden", "on"), [
    # 1.5% of 10 s is 0.15 s; the bound at 2 pairs adds about 0.07 s to the mean (floor 0.05 s)
    ({"small": 10.0}, [0.0, 0.0], False),      # ruled in: nothing to measure on for
    ({"small": 10.0}, [0.12, 0.12], True),     # unruled, the mean inside its margin: more pairs
    ({"small": 10.0}, [0.20, 0.20], False),    # the mean past its margin: more would not do
    # one cell past its margin stops the run, though the other (1.5% of 20 s: 0.30 s) is unruled
    # with its mean inside: the headline is inconclusive whatever the other's pairs say
    ({"small": 10.0, "big": 20.0}, [0.25, 0.25], False),
    ({"small": 10.0, "big": 20.0}, [0.12, 0.12], True),
])
def test_a_run_measures_on_only_while_more_pairs_could_rule_its_cells_in(
        main_s: dict[str, float], hidden: list[float], on: bool) -> None:
    from evalbot.engine.contract.shared import wall_clock  # noqa: PLC0415
    from evalbot.engine.contract.shared.witness_interval import Floor  # noqa: PLC0415
    from evalbot.grading.unexplained_cost import cost_critical  # noqa: PLC0415

    # the head prints main's rates; its processes take `hidden` longer
    witness, records = _run_doc({k: [s] * len(hidden) for k, s in main_s.items()}, main_s, hidden)
    floor = Floor(0.05, 7)
    assert wall_clock.measure_on(witness, records, list(main_s), cost_critical(2, floor), floor,
                                 0.015, dict.fromkeys(main_s, 0.003)) is on


def test_a_printed_slowdown_counts_at_main_s_time_and_widens_the_floor() -> None:
    """The head printed cell a 1% slower and cell b a little faster, its wall time exactly
    its printed work: u is 0; uncovered, a's printed 0.1 s joins u and a's noise (its rule
    floor x main's 10 s) widens the run's floor; b's printed saving still counts."""
    from evalbot.engine.contract.shared import wall_clock  # noqa: PLC0415
    from evalbot.engine.contract.shared.witness_interval import Floor  # noqa: PLC0415

    witness, records = _run_doc({"a": [10.1, 10.1], "b": [9.95, 9.97]})
    assert wall_clock.printed_slower(witness, records) == ["a"]
    assert np.allclose(wall_clock.pair_costs(witness, records), 0.0)
    u, floor = wall_clock.uncovered(witness, records, Floor(0.05, 7), {"a": 0.003, "b": 0.003})
    assert np.allclose(u, 0.1)
    assert floor == Floor(pytest.approx(float(np.hypot(0.05, 0.03))), 7)
    # without a calibrated floor the pairs' own sd judges: nothing to widen
    assert wall_clock.uncovered(witness, records, Floor(), {"a": 0.003})[1] == Floor()


def test_a_calibration_job_measures_its_pairs_and_parses(tmp_path: Path) -> None:
    """`evalbot calibrate` replaces the rule's looks by its one look: the runs' per-look wall
    clock values go with them (the guide's calibration once failed on the box on exactly
    this: `runs[0].cost_critical: one per look [6]`)."""
    from evalbot.config.settings import BoxConfig  # noqa: PLC0415
    from evalbot.service.calibrate import calibration_job  # noqa: PLC0415

    box = BoxConfig(name="b", kind="local", workdir=str(tmp_path), repo=str(tmp_path))
    for name in ("sparkinfer", "demo"):
        job = calibration_job(_simbox.shipped(name), _simbox.POLICY, box, "a" * 40, 6)
        parsed = parse_job(json.loads(job.to_json()))
        assert parsed.rule.looks == [6] and all(not r.cost_critical for r in parsed.runs)
