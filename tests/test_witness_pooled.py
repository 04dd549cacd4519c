"""A witness's per-pair sd pooled with its calibrated floor, as the speed cells pool theirs.

engine/contract/shared/witness_interval.py computes the bounds for the harness's stop (witness.settled)
and the bot's judgement (confirmation.judge) alike: S pooled with the profile's `sd_floor_s`
(`floor_df` df) at floor_df + n - 1 df, the own S at n - 1 df when the F guard says S refutes
the floor, and exactly today's own-sd interval without a floor.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from scipy import stats as sps

from evalbot.config.errors import ConfigError
from evalbot.config.resources import LABELS_FILE as LABELS
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract import witness_spec
from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.job import parse_job
from evalbot.engine.contract.results import RESULTS_SCHEMA, validate
from evalbot.engine.contract.shared import witness_interval
from evalbot.engine.contract.shared.witness_interval import Critical, Floor, saving_interval
from evalbot.engine.measure import witness
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import load_profile
from evalbot.grading import confirmation
from evalbot.grading.policy import load_labels

DECODE, PREFILL = "m/decode@4096", "m/prefill@0"
FLOOR = Floor(0.05, 5)
# one look of 4 pairs at the bot's levels: confirmation 0.0025, contradiction 0.0005
CRIT = confirmation.critical(4, 0.0025, 0.0005, FLOOR.df)
D_STEADY = np.array([0.10, 0.16, 0.07, 0.13])  # S = 0.039: consistent with the 0.05 s floor
D_NOISY = np.array([0.9, -0.6, 1.2, -0.3])  # S = 0.85: refutes it


STEPS, PROMPT = 1000, 4000  # a 4000-id prefill, then 1000 decode ids fed one per step


def _spec(looks: list[int], floor: Floor = FLOOR) -> witness_spec.WitnessSpec:
    doc = {"name": "w", "argv": ["x"], "cells": {DECODE: STEPS, PREFILL: PROMPT},
           "prompt_tokens": PROMPT, "steps": STEPS, "output": {"kind": "step_lines"},
           "output_tokens": STEPS + 1, "clock": "handoff", "pairs": looks}
    if floor.given:
        doc.update(sd_floor_s=floor.sd_s, floor_df=floor.df)
    return confirmation.with_stops(witness_spec.parse_witness(doc, "w", {DECODE, PREFILL}), 0.01)


def _old_bounds(d: np.ndarray, t: float, base_s: float) -> tuple[float, float]:
    """The interval before floors: own sd at n - 1 df, floored at 0.1% of main's time."""
    sd = max(float(np.std(d, ddof=1)), 0.001 * base_s, 1e-6)
    return float(np.mean(d)) - t * sd / 2, float(np.mean(d)) + t * sd / 2


def test_the_critical_values_are_t_at_own_and_pooled_df_with_the_rules_guard() -> None:
    assert CRIT.lower == pytest.approx(sps.t.isf(0.0025, 3), abs=1e-6)
    assert CRIT.upper == pytest.approx(sps.t.isf(0.0005, 3), abs=1e-6)
    assert CRIT.lower_pooled == pytest.approx(sps.t.isf(0.0025, 5 + 3), abs=1e-6)
    assert CRIT.upper_pooled == pytest.approx(sps.t.isf(0.0005, 5 + 3), abs=1e-6)
    assert CRIT.guard == pytest.approx(sps.f.isf(0.01, 3, 5), abs=1e-6)
    assert CRIT.lower_pooled < CRIT.lower / 1.9  # the point: 3.8 instead of 7.5 at 4 pairs
    no_floor = confirmation.critical(4, 0.0025, 0.0005, 0)
    assert (no_floor.lower_pooled, no_floor.guard) == (0.0, 0.0)


def _pooled(d: np.ndarray, f: float, v: int) -> float:
    n = len(d)
    return math.sqrt((v * f * f + (n - 1) * np.var(d, ddof=1)) / (v + n - 1))


@pytest.mark.parametrize(("d", "floor", "crit", "sd_kind", "sd"), [
    # S 0.039 with a 0.05 s floor of 5 df: pooled, at 8 df
    (D_STEADY, FLOOR, CRIT, "pooled", _pooled(D_STEADY, 0.05, 5)),
    # S 0.85 refutes the floor (S^2 > 12.06 f^2): its own sd at 3 df
    (D_NOISY, FLOOR, CRIT, "own", float(np.std(D_NOISY, ddof=1))),
    # a floor, but a job without the bot's pooled values (an older bot): own sd
    (D_STEADY, FLOOR, Critical(CRIT.lower, CRIT.upper), "own", float(np.std(D_STEADY, ddof=1))),
    # no floor: own sd
    (D_STEADY, Floor(), CRIT, "own", float(np.std(D_STEADY, ddof=1))),
    # identical times and a tiny floor: the 0.1%-of-main's-time floor still holds (10 ms)
    (np.full(4, 0.3), Floor(1e-5, 5), CRIT, "pooled", 0.01),
])
def test_pooled_bounds_table(d: np.ndarray, floor: Floor, crit: Critical, sd_kind: str,
                             sd: float) -> None:
    got = saving_interval(d, 10.0, crit, floor)
    lo_t, hi_t = ((crit.lower_pooled, crit.upper_pooled) if sd_kind == "pooled"
                  else (crit.lower, crit.upper))
    assert got.sd == sd_kind
    assert got.mean == pytest.approx(float(np.mean(d)))
    assert got.lo == pytest.approx(got.mean - lo_t * sd / 2)
    assert got.hi == pytest.approx(got.mean + hi_t * sd / 2)


@pytest.mark.parametrize("seed", range(10))
def test_a_zero_floor_is_exactly_the_interval_before_floors(seed: int) -> None:
    d = np.random.default_rng(seed).normal(0.2, 0.1, 4)
    got = saving_interval(d, 10.0, CRIT, Floor())
    assert (got.lo, got.hi) == pytest.approx(_old_bounds(d, CRIT.lower, 10.0)[:1]
                                             + _old_bounds(d, CRIT.upper, 10.0)[1:], rel=1e-12)
    spec = _spec([4, 8], Floor())
    assert spec.pooled_stop_t == spec.pooled_spoof_t == spec.guard == ()
    assert (spec.sd_floor_s, spec.floor_df) == (0.0, 0)


# both sides' output: one STEP line per id, the argmax after the prompt and after each fed id
MAINS = "".join(f"{witness_spec.STEP}{(7 * i) % 1000}\n" for i in range(STEPS + 1))


def _launch(head_saves: list[float]) -> witness.Launch:
    """Main takes 10 s; the head's process of pair i saves head_saves[i] seconds."""
    launched: list[str] = []

    def launch(side: str, argv: list[str], timeout_s: float, prompt: list[int]) -> witness.Timed:
        pair = len(launched) // 2
        launched.append(side)
        return witness.Timed(True, MAINS, 10.0 - (head_saves[pair] if side == "head" else 0.0),
                             False)

    return launch


def _judged(record: witness.WitnessRecord, claims: dict[str, tuple[float, float]]) -> dict[str, Any]:
    return confirmation.judge(record.to_dict(), claims, confirmation.confirm_alpha(0.01, 1))


@pytest.mark.parametrize("seed", range(60))
def test_the_harness_stops_exactly_where_the_bot_decides(tmp_path: Path, seed: int) -> None:
    # random heads around the floor's noise: the harness stops at the first look iff the bot,
    # judging those 4 pairs of a witness of looks [4, 8], confirms or contradicts
    rng = np.random.default_rng(seed)
    saves = list(rng.normal(rng.uniform(0, 0.3), rng.uniform(0.02, 0.12), 8))
    claims = {DECODE: (float(rng.uniform(0.01, 0.6)), 8.0), PREFILL: (float(rng.uniform(0, 0.1)),
                                                                      0.5)}
    spec = _spec([4, 8])
    record = witness.measure(spec, lambda a, s: a, _launch(saves), tmp_path, warmup=0,
                             stop=witness.stop_for(claims, [DECODE, PREFILL]))
    first = witness.WitnessRecord(spec, [s for s in record.samples if s["pair"] < 4])
    judged = _judged(first, claims)
    decided = {c["status"] for c in judged["cells"].values()} & {"confirmed", "contradicted"}
    assert (len(record.samples) == 8) == bool(decided), (saves, claims, judged)
    assert {record.settled_by} - {""} == decided  # and it settles for the bot's reason


def test_pooling_lets_the_first_look_confirm_a_steady_saving(tmp_path: Path) -> None:
    # 0.145 s saved with S 0.039: at 4 pairs (the first look's alpha 0.001, rule 2) the own
    # half-width 10.2 S / 2 = 0.2 s hides it; pooled with the floor (counted for 3 df, t at 6
    # df) it is certain at the first look
    claims = {DECODE: (0.145, 8.0), PREFILL: (0.0, 0.5)}
    stop = witness.stop_for(claims, [DECODE])
    runs = {name: witness.measure(_spec([4, 8], floor), lambda a, s: a,
                                  _launch(list(D_STEADY + 0.03) * 2), tmp_path, warmup=0,
                                  stop=stop)
            for name, floor in (("pooled", FLOOR), ("own", Floor()))}
    assert [len(r.samples) // 2 for r in runs.values()] == [4, 8]
    judged = _judged(runs["pooled"], claims)
    assert (judged["sd"], judged["cells"][DECODE]["status"]) == ("pooled", "confirmed")


@pytest.mark.parametrize("seed", range(20))
def test_a_head_noisier_than_the_floor_is_judged_on_its_own_sd(tmp_path: Path,
                                                               seed: int) -> None:
    # hostile: claims 1.5 s, really saves 1.5 s of work but sleeps 0-3 s at random in its
    # witness, saving nothing on average; pooled with the 0.05 s floor its lucky draws would
    # look certain. The guard sees S >> f: the own sd and no confirmation.
    delays = np.random.default_rng(seed).uniform(0, 3, 8)
    claims = {DECODE: (1.5, 8.0), PREFILL: (0.0, 0.5)}
    spec = _spec([4, 8])
    record = witness.measure(spec, lambda a, s: a, _launch(list(1.5 - delays)), tmp_path,
                             warmup=0, stop=witness.stop_for(claims, [DECODE]))
    judged = _judged(record, claims)
    assert judged["sd"] == "own" and judged["cells"][DECODE]["status"] != "confirmed"
    d = witness_interval.pair_savings(record.samples, need_verified=True)
    alpha = confirmation.alpha_at(spec.looks, len(d), 0.005, spec.rule_version)
    own = saving_interval(d, 10.0, confirmation.critical(len(d), alpha, 0.0005), Floor())
    assert judged["lo_s"] == pytest.approx(own.lo)  # the bound of a witness without a floor


def test_the_job_carries_pooled_values_and_the_guard_per_look() -> None:
    spec = _spec([4, 8, 12])
    assert len(spec.pooled_stop_t) == len(spec.pooled_spoof_t) == len(spec.guard) == 3
    assert all(p < t for p, t in zip(spec.pooled_stop_t, spec.stop_t, strict=True))
    record = witness.WitnessRecord(spec).to_dict()
    assert (record["sd_floor_s"], record["floor_df"]) == (0.05, 5)  # the bot judges with it


@pytest.mark.parametrize(("edit", "field"), [
    ({"sd_floor_s": -0.1, "floor_df": 5}, "sd_floor_s"),
    ({"sd_floor_s": "big", "floor_df": 5}, "sd_floor_s"),
    ({"sd_floor_s": 0.05, "floor_df": -1}, "floor_df"),
    ({"sd_floor_s": 0.05}, "floor_df"),  # an sd without its degrees of freedom
    ({"floor_df": 5}, "floor_df"),
    ({"sd_floor_s": 0.05, "floor_df": 2.5}, "floor_df"),
    ({"pooled_stop_t": [3.0]}, "pooled_stop_t"),
    ({"guard": [1.0, 2.0, 3.0]}, "guard"),
    ({"pooled_stop_t": [3.0, 2.0]}, "guard"),  # pooled values without their guard
])
def test_bad_floors_are_refused_naming_the_field(edit: dict[str, Any], field: str) -> None:
    doc = {"name": "w", "argv": ["x"], "cells": {DECODE: 3}, "prompt_tokens": 4,
           "output": {"kind": "ids_line"}, "output_tokens": 3, "pairs": [4, 8], **edit}
    with pytest.raises(ContractError, match=rf"w\.{field}"):
        witness_spec.parse_witness(doc, "w", {DECODE})


def test_the_sparkinfer_witnesses_carry_the_measured_floor_into_the_job(tmp_path: Path) -> None:
    box = BoxConfig(name="local", kind="local", workdir=str(tmp_path), repo=str(tmp_path))
    policy = load_labels(LABELS).policy("default")
    job = make_job(load_profile("sparkinfer"), policy, box, "a" * 40, "b" * 40)
    assert parse_job(json.loads(job.to_json())) == job  # the contract carries it all
    specs = {w.name: w for r in job.runs for w in r.witnesses}
    for spec in specs.values():
        assert len(spec.pooled_stop_t) == len(spec.guard) == len(spec.looks)
    # each floor bounds what the tool measured on the H200 (the smoke script before
    # scripts/gpu_run.sh): a pair's saving as the difference of two processes of the same build, its df
    # no more than the processes' count less one
    rows = [json.loads(line) for line in (Path(__file__).parent / "data" / "sparkinfer"
                                          / "witness-h200-timings.jsonl").read_text().splitlines()
            if line.strip()]
    measured: dict[str, list[float]] = {}
    for row in rows:
        if row.get("model") == "qwythos":
            measured.setdefault(row["witness"], []).append(row["handoff_s"])
    for name, seconds in measured.items():
        spec = specs[name]
        pair_sd = float(np.std(seconds, ddof=1)) * math.sqrt(2)
        assert spec.sd_floor_s >= 0.95 * pair_sd and spec.floor_df <= len(seconds) - 1, name
    # prefill-4096, measured by 94 processes, is taken at its measurement: 47 pairs' sd
    d = np.diff(np.asarray(measured["prefill-4096"])[:94].reshape(-1, 2), axis=1).ravel()
    assert (specs["prefill-4096"].sd_floor_s, specs["prefill-4096"].floor_df) == (
        round(float(np.std(d, ddof=1)), 4), len(d) - 1)


def test_the_llamacpp_witness_floor_was_its_h200_a_a_and_is_the_h100_s() -> None:
    # the witness timings of 2026-12-02 (a script before scripts/gpu_run.sh): A/A pairs of the
    # shipped tool (FA off, "nofa") on the handoff clock, one fresh prompt a pair; "base" is the
    # tool before, with FA left on auto. That was the profile's floor until version 7, which
    # carries GPU run 53L's H100 A/A of the stepped protocol, four times lower
    # (tests/test_llamacpp_h100_53l.py reads it)
    rows = list(csv.DictReader(open(Path(__file__).parent / "data" / "llamacpp"
                                    / "h200-witness-aa.tsv"), delimiter="\t"))
    pairs: dict[int, dict[str, float]] = {}
    for row in rows:
        if row["variant"] == "nofa":
            pairs.setdefault(int(row["pair"]), {})[row["side"]] = float(row["handoff_s"])
    d = [p["a"] - p["b"] for p in pairs.values() if len(p) == 2]
    assert (len(d) - 1, round(float(np.std(d, ddof=1)), 3)) == (24, 0.032)
    [spec] = [w for r in load_profile("llamacpp").runs for w in r.witnesses
              if w.name == "prefill-4k-decode-896"]
    assert (spec.sd_floor_s, spec.floor_df) == (0.0079, 15)


def test_a_profile_floor_without_its_df_is_refused_naming_the_key(tmp_path: Path) -> None:
    path = Path(__file__).parents[1] / "evalbot" / "profiles" / "sparkinfer.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["speed"]["runs"][0]["witnesses"][0].pop("floor_df")
    broken = tmp_path / "p.yaml"
    broken.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="witnesses.*floor_df"):
        load_profile(str(broken))


def test_the_results_keep_the_floor_and_refuse_a_negative_one(tmp_path: Path) -> None:
    record = witness.measure(_spec([4, 8]), lambda a, s: a, _launch([0.1] * 8), tmp_path,
                             warmup=0)
    doc = {"schema": RESULTS_SCHEMA, "job_id": "j", "profile": "p", "box": {},
           "base": {"sha": "a" * 40, "ok": True}, "head": {"sha": "b" * 40, "ok": True},
           "rule": {"looks": [3], "critical": [4.0], "sd_floor": 0.01, "significance": 0.02,
                    "tolerance": 0.02}, "models": [], "cells": [], "correctness": None,
           "failures": [], "witnesses": [record.to_dict()]}
    assert validate(json.loads(json.dumps(doc)))["witnesses"][0]["floor_df"] == 5
    doc["witnesses"][0]["floor_df"] = -5
    with pytest.raises(ContractError, match=r"witnesses\[0\]\.sd_floor_s, floor_df"):
        validate(doc)
