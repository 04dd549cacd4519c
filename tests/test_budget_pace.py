"""The box-time budget follows main's pace for a run's first verdict look (engine/measure/speed.py
`_reserve_first_verdict`): the shipped two-model sparkinfer profile, every sample process at 120 s
(4.7x the H200's Qwythos sweep), on the simulated box of the benches with the real harness and
the real grading. Before, the first runs spent the 1800 s budget and Qwen3.6's run, last, ended
with no look ("budget"): the A/A inconclusive, an honest Qwen3.6 speedup without a tier."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench import _simbox
from evalbot.evaluation.profile import load_profile

PACE_S = 120.0


def _evaluate(head: _simbox.Head, tmp: Path, seed: int) -> tuple[_simbox.Outcome, _simbox.SimulatedBox]:
    evaluator = _simbox.Evaluator(load_profile("sparkinfer"), _simbox.World("sparkinfer", PACE_S), tmp)
    box = _simbox.SimulatedBox(evaluator.job, evaluator.world, head, np.random.default_rng(seed), tmp)
    box.run_all()
    return evaluator.evaluate(head, np.random.default_rng(seed)), box


def _verdict_pairs(box: _simbox.SimulatedBox) -> int:
    return min(b.pairs for b in box.schedule.values() if b.directional_floor >= 0)


def test_every_run_reaches_its_first_verdict_look_at_a_slow_pace(tmp_path: Path) -> None:
    outcome, box = _evaluate(_simbox.Head("main"), tmp_path, seed=3)
    need = _verdict_pairs(box)
    assert box.job.rule.budget_s < len(box.job.runs) * (need + 1) * 2 * PACE_S  # would not fit
    for rec in box.records.values():
        pairs = max((look["pairs"] for look in rec.looks), default=0)
        assert rec.stopped != "budget" and (rec.decided or pairs >= need), (rec.cell.key, rec.stopped)
    assert outcome.kind == "neutral", outcome


def test_the_last_models_honest_speedup_keeps_its_tier_at_a_slow_pace(tmp_path: Path) -> None:
    profile = load_profile("sparkinfer")
    last = profile.runs[-1].model
    cells = [f"{last}/{c.metric}@{c.ctx}" for run in profile.runs if run.model == last
             for c in run.cells if c.metric == "decode"]
    head = _simbox.Head("qwen3.6 decode +10%", real={k: 1.10 for k in cells}, true_tier="L")
    outcome, _ = _evaluate(head, tmp_path, seed=5)
    assert outcome.tier in ("M", "L"), outcome
