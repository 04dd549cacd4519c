"""The box-time budget follows main's pace for a run's first verdict look (engine/measure/speed.py
`_reserve_first_verdict`): the shipped two-model sparkinfer profile, every sample process at 120 s
(4.7x the H200's Qwythos sweep), on the simulated box of the benches with the real harness and
the real grading. Before, the first runs spent the 1800 s budget and Qwen3.6's run, last, ended
with no look ("budget"): the A/A inconclusive, an honest Qwen3.6 speedup without a tier.

And the budget counted in pairs (StoppingRule.total_budget_s, the profile's `budget_pace_s` and
`max_budget_s`): the shipped llamacpp profile at six times its H200 pace gets the pairs its
budget_s buys at that pace, up to the cap, by main's pace alone; the keys' validation."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from bench import _simbox, verdict_quality
from bench._scenarios import job_of
from evalbot.config.errors import ConfigError
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.job import SpeedRun, StoppingRule, parse_job
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import PROFILES_DIR as PROFILES
from evalbot.evaluation.profile import load_profile
from evalbot.service.calibrate import calibration_job

PACE_S = 120.0


class _Recording(_simbox.SimulatedBox):
    """The simulated box, keeping each side's warm-up walls (main's pace scales the budget)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.warm: dict[str, list[float]] = {"base": [], "head": []}

    def _sample(self, run: SpeedRun, side: str, warmup: bool = False) -> tuple[dict, bool]:
        out = super()._sample(run, side, warmup)
        if warmup:
            self.warm[side].append(next(iter(out[0].values()))["wall_s"])
        return out


def _evaluate(head: _simbox.Head, tmp: Path, seed: int, profile: str = "sparkinfer",
              pace: float = PACE_S) -> tuple[_simbox.Outcome, _Recording]:
    evaluator = _simbox.Evaluator(load_profile(profile), _simbox.World(profile, pace), tmp)
    box = _Recording(evaluator.job, evaluator.world, head, np.random.default_rng(seed), tmp)
    box.run_all()
    return evaluator.evaluate(head, np.random.default_rng(seed)), box


def _verdict_pairs(box: _simbox.SimulatedBox) -> int:
    return min(b.pairs for b in box.schedule if b.directional_floor >= 0)


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


# ---- the budget counted in pairs (StoppingRule.total_budget_s) ------------------------
# llamacpp's budget_s buys its last look (48 pairs) at the H200's 9.25 s a llama-bench process;
# its budget_pace_s and max_budget_s give a slower box the same pairs, up to a cap.
SLOW_S = 6 * 9.25  # every sample process six times the H200's
DECODE_4K = "qwen3-0p6b-synth/decode@4096"  # the witnessed cell
PLUS_3 = _simbox.Head("+3% decode@4096", real={DECODE_4K: 1.03}, true_tier="XS")


def _llamacpp(head: _simbox.Head, tmp: Path, seed: int, **rule: Any) -> _Recording:
    """One llamacpp job (its rule's fields replaced by `rule`) at SLOW_S a process."""
    evaluator = _simbox.Evaluator(load_profile("llamacpp"), _simbox.World("llamacpp", SLOW_S), tmp)
    job = dataclasses.replace(evaluator.job, rule=dataclasses.replace(evaluator.job.rule, **rule))
    box = _Recording(job, evaluator.world, head, np.random.default_rng(seed), tmp)
    box.run_all()
    return box


def test_a_slow_box_gets_the_pairs_the_budget_buys_at_the_profiles_pace(tmp_path: Path) -> None:
    """Before, the deadline was budget_s (or the first verdict look's reservation, 8 pairs): the
    +3% head stopped for "budget" after its look at 8 pairs, inconclusive; it needs 32 here."""
    outcome, box = _evaluate(PLUS_3, tmp_path, seed=3, profile="llamacpp", pace=SLOW_S)
    rule, last = box.job.rule, box.job.rule.looks[-1]
    assert rule.budget_s < (last + 1) * 2 * SLOW_S  # budget_s alone stops short of the last look
    assert box.start == 0 and box.deadline == pytest.approx(
        rule.budget_s * box.warm["base"][-1] / rule.budget_pace_s)
    assert box.deadline > (last + 1) * 2 * SLOW_S  # room for the last look
    target = box.records[DECODE_4K]
    assert (target.stopped, target.looks[-1]["decision"]) == ("decided", "improved")
    assert target.looks[-1]["pairs"] > 8 and outcome.tier == "XS", outcome
    assert all(rec.stopped in ("decided", "last_look") for rec in box.records.values())


def test_the_scaled_budget_stops_at_its_cap(tmp_path: Path) -> None:
    box = _llamacpp(PLUS_3, tmp_path, seed=3, max_budget_s=1500.0)
    assert box.deadline == 1500.0  # not budget_s x 6, nor budget_s, nor the first-look reservation
    assert box.records[DECODE_4K].stopped == "budget"
    # it measured up to the cap: the pair that began before it, and no other
    assert 1500.0 < box.measured_s < 1500.0 + 2 * 1.1 * SLOW_S


def test_a_slow_head_does_not_lengthen_the_budget(tmp_path: Path) -> None:
    cells = {f"{r.model}/{c.metric}@{c.ctx}": 0.1 for r in load_profile("llamacpp").runs
             for c in r.cells}  # its work ten times slower
    box = _llamacpp(_simbox.Head("slow", real=cells), tmp_path, seed=4)
    base, head = box.warm["base"][-1], box.warm["head"][-1]
    assert head > base + 20  # a much slower head process ...
    rule = box.job.rule  # ... and the budget scaled by main's alone
    assert box.deadline == pytest.approx(rule.budget_s * base / rule.budget_pace_s)


@pytest.mark.parametrize(("keys", "pace", "total"), [
    ({}, 55.5, 930.0),  # no keys: budget_s, whatever the pace (sparkinfer, demo)
    ({"budget_pace_s": 9.25, "max_budget_s": 14400.0}, None, 930.0),  # no warm-up: no pace
    ({"budget_pace_s": 9.25, "max_budget_s": 14400.0}, 4.0, 930.0),  # a faster box: never less
    ({"budget_pace_s": 9.25, "max_budget_s": 14400.0}, 9.25, 930.0),
    ({"budget_pace_s": 9.25, "max_budget_s": 14400.0}, 55.5, 5580.0),  # 6x: six times the pairs' time
    ({"budget_pace_s": 9.25, "max_budget_s": 14400.0}, 200.0, 14400.0),  # the cap
    ({"budget_pace_s": 9.25, "max_budget_s": 500.0}, 55.5, 930.0),  # a cap below budget_s: budget_s
])
def test_the_budget_in_pairs(keys: dict[str, float], pace: float | None, total: float) -> None:
    rule = StoppingRule(looks=[4, 48], critical=[3.0, 2.0], sd_floor=0.03, significance=0.02,
                        tolerance=0.02, budget_s=930.0, **keys)
    assert rule.total_budget_s(pace) == pytest.approx(total)


def _llamacpp_copy(tmp: Path, **speed: Any) -> Path:
    doc = yaml.safe_load((PROFILES / "llamacpp.yaml").read_text())
    for key, value in speed.items():
        if value is None:
            doc["speed"].pop(key, None)
        else:
            doc["speed"][key] = value
    path = tmp / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(("speed", "message"), [
    ({"max_budget_s": 600}, r"speed\.max_budget_s: 600.0 is not a cap .* at least budget_s \(930\)"),
    ({"max_budget_s": 0}, r"speed\.max_budget_s: 0.0 is not a cap"),
    ({"max_budget_s": -1}, r"speed\.max_budget_s: -1.0 is not a cap"),
    ({"budget_pace_s": 0}, r"speed\.budget_pace_s: 0.0 is not a sample process's time"),
    ({"budget_pace_s": -9.25}, r"speed\.budget_pace_s: -9.25 is not a sample process's time"),
    ({"max_budget_s": None}, r"speed\.budget_pace_s: needs max_budget_s too \(both or neither\)"),
    ({"budget_pace_s": None}, r"speed\.max_budget_s: needs budget_pace_s too \(both or neither\)"),
    ({"budget_pace_s": "slow"}, r"speed\.budget_pace_s: expected float"),
])
def test_bad_budget_in_pairs_keys_are_refused_naming_the_key(
        tmp_path: Path, speed: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_profile(str(_llamacpp_copy(tmp_path, **speed)))


def test_the_budget_in_pairs_keys_travel_with_the_job(tmp_path: Path) -> None:
    box = BoxConfig(name="local", kind="local", workdir=str(tmp_path), repo=str(tmp_path))
    job = make_job(load_profile("llamacpp"), _simbox.POLICY, box, "a" * 40, "b" * 40)
    assert (job.rule.budget_pace_s, job.rule.max_budget_s) == (9.25, 14400.0)
    assert parse_job(json.loads(job.to_json())) == job
    old = json.loads(job.to_json())  # a job from before the keys loads without them
    del old["rule"]["budget_pace_s"], old["rule"]["max_budget_s"]
    assert (parse_job(old).rule.budget_pace_s, parse_job(old).rule.max_budget_s) == (None, None)
    sparkinfer = make_job(load_profile("sparkinfer"), _simbox.POLICY, box, "a" * 40, "b" * 40)
    # counted in pairs at a Qwythos sweep's 25.5 s on the H200 since issue 46
    assert (sparkinfer.rule.budget_pace_s, sparkinfer.rule.max_budget_s) == (25.5, 14400.0)
    # an A/A calibration has four times the budget: four times the cap too, at the same pace
    aa = calibration_job(load_profile("llamacpp"), _simbox.POLICY, box, "a" * 40, pairs=30)
    assert (aa.rule.budget_s, aa.rule.budget_pace_s, aa.rule.max_budget_s) == (3720.0, 9.25, 57600.0)


def test_the_rule_table_of_the_bench_counts_the_budget_in_pairs() -> None:
    """bench/verdict_quality.py's vectorised rule (`--rule`) spends the same scaled budget: at six
    times the H200's pace an XS-centre head's run measures as many pairs as at the H200's pace
    (budget_s alone would stop it at 8)."""
    (sc,) = [s for s in verdict_quality.scenarios() if s.name == "H200 A/A"]
    job = job_of(sc, _simbox.POLICY)
    pairs = {pace: verdict_quality.simulate(job, sc, 0.0275, 400, np.random.default_rng(7),
                                            given=pace).pairs
             for pace in (9.25, SLOW_S)}
    # budget_s alone buys 930 / (2 x 55.5) = 8 pairs at the slow pace
    alone = job.rule.budget_s // (2 * SLOW_S)
    assert pairs[SLOW_S].max() == pairs[9.25].max() > alone and pairs[SLOW_S].mean() > alone
    assert pairs[SLOW_S].mean() == pytest.approx(pairs[9.25].mean(), rel=0.02)


def test_the_witness_first_look_room_follows_the_scaled_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The witnesses' part of the budget before their first look is witness_share x the budget
    main's pace gave, not x budget_s: on a box six times slower a witness's processes are six
    times longer, and its allowance grows with them (before, it stayed at a quarter of 930 s)."""
    from evalbot.engine.measure import speed, witness
    rooms: list[tuple[float, witness.Room | None]] = []  # (the measuring's budget left, room)
    real = speed.witness_plan.room

    def spy(*args: Any, **kwargs: Any) -> witness.Room | None:
        rooms.append((args[2], out := real(*args, **kwargs)))
        return out

    monkeypatch.setattr(speed.witness_plan, "room", spy)
    box = _llamacpp(PLUS_3, tmp_path, seed=3)
    rule, total = box.job.rule, box.deadline - box.start
    assert total > 5 * rule.budget_s and rooms  # the scaled budget, and the witness ran
    for left, room in rooms:
        assert room is not None
        assert room.budget_s == pytest.approx(max(left + rule.witness_share * total, 0.0))
