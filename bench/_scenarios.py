"""The rule table's scenarios (bench/verdict_quality.py): each shipped profile at its measured
noise and under the stresses of bench/_stress.py, and the job `make_job` builds for it."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from bench import _stress
from bench._stress import Noise, normal
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.job import Job, SpeedRun
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import Profile, ProfileCell, load_profile
from evalbot.grading.policy import Policy

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "fixtures" / "h200-aa-single-rep.json"
SHA = "0" * 40
# The shipped profile's own H200 A/A (tests/data/llamacpp/h200-aa.results.json): its scored
# (second) pp4096 test at depth 0 ran ~36.5k tok/s in 24 of 42 processes against ~41k, on both
# sides alike; the profile dropped that cell (evalbot/profiles/llamacpp.yaml) with this floor
BIMODAL_SHARE, BIMODAL_FACTOR = 24 / 42, 0.9
PREFILL0 = ProfileCell("prefill", 0, sd_floor=0.0097)


@dataclass(frozen=True)
class Scenario:
    name: str
    profile: str
    noise: Noise
    calibrated_sd: float = 0.0  # > 0: floors a calibration at this per-pair sd would store
    score_prefill0: bool = False  # llamacpp: score depth-0 prefill again (the profile before)
    target: float = 0.05  # the effect power must reach 95% at


def fixture(slow_first: bool, bimodal: bool = False) -> Noise:
    """Whole measured processes; a cell maps to its (prompt or generation, depth) test.
    `slow_first`: the process's first test (pp4096 at depth 0) 10% slow in a third of the
    processes, when the profile scores it; `bimodal`: its scored copy 10% slow in the shipped
    A/A's share of processes, throw-away or not."""
    doc = json.loads(FIXTURE.read_text())
    runs = doc["runs"]
    tests = [(e["n_gen"] > 0, e["n_depth"]) for e in runs[0]]  # the process's test order
    logs = np.log([[e["avg_ts"] for e in run] for run in runs])
    logs -= logs.mean(axis=0)

    def draw(rng: np.random.Generator, sims: int, procs: int, _: int, run: SpeedRun) -> np.ndarray:
        cols = [tests.index((c.metric == "decode", c.ctx)) for c in run.cells]
        x = logs[rng.integers(0, len(runs), size=(sims, procs))][..., cols]  # (sims, procs, C)
        x = np.moveaxis(x, 2, 1).copy()
        first = [i for i, col in enumerate(cols) if col == 0]
        share = BIMODAL_SHARE if bimodal else 1 / 3 if slow_first and \
            not run.parse.get("discard_first") else 0.0
        slow = rng.random((sims, 1, procs)) < share
        x[:, first, :] += np.where(slow, math.log(BIMODAL_FACTOR), 0.0)
        return x
    return draw


def scenarios() -> list[Scenario]:
    """Each profile at its measured noise, then the stresses (bench/_stress.py) on it."""
    h200, spark = fixture(False), normal(0.0025)
    return [
        Scenario("H200 fixture", "llamacpp", h200),
        Scenario("H200 +slow first", "llamacpp", fixture(True)),
        Scenario("H200 prefill@0 kept", "llamacpp", fixture(False, bimodal=True),
                 score_prefill0=True),
        Scenario("H200 +throttle", "llamacpp", _stress.throttle(h200)),
        Scenario("H200 +t(3) tails", "llamacpp", _stress.tails(h200)),
        Scenario("H200 +drift", "llamacpp", _stress.drift(h200, 0.02)),
        Scenario("H200 stale 2x", "llamacpp", _stress.scaled(h200, 2.0)),
        Scenario("generic 1%", "llamacpp", normal(0.01), calibrated_sd=math.sqrt(2) * 0.01),
        Scenario("generic 2%", "llamacpp", normal(0.02), calibrated_sd=math.sqrt(2) * 0.02),
        Scenario("spark 0.05%", "sparkinfer", normal(0.0005), target=0.03),
        Scenario("spark 0.25%", "sparkinfer", spark, target=0.03),
        Scenario("spark +slow first", "sparkinfer", _stress.slow_first(spark), target=0.03),
        Scenario("spark +throttle", "sparkinfer", _stress.throttle(spark), target=0.03),
        Scenario("spark +t(3) tails", "sparkinfer", _stress.tails(spark), target=0.03),
        Scenario("spark +drift", "sparkinfer", _stress.drift(spark, 0.0025), target=0.03),
        Scenario("spark stale 2x", "sparkinfer", normal(0.005), target=0.03),
        Scenario("spark 1% (stale 4x)", "sparkinfer", normal(0.01), target=0.03),
        Scenario("demo 3% pair", "demo", normal(0.03 / math.sqrt(2)), target=0.5),
    ]


def job_of(sc: Scenario, policy: Policy) -> Job:
    profile = load_profile(sc.profile)
    if sc.score_prefill0:
        profile = with_prefill0(profile)
    box = BoxConfig(name="sim", kind="local", workdir="/sim", repo="/sim", trusted=True)
    floors = ({f"{r.model}/{c.metric}@{c.ctx}": sc.calibrated_sd
               for r in profile.runs for c in r.cells} if sc.calibrated_sd else None)
    return make_job(profile, policy, box, SHA, SHA, seed=1, sd_floors=floors, floor_df=11)


def with_prefill0(profile: Profile) -> Profile:
    """The llamacpp profile as it was before issue 33: depth-0 prefill scored too."""
    runs = tuple(replace(r, cells=(*r.cells, PREFILL0)) for r in profile.runs)
    return replace(profile, runs=runs)


def changed_cell(job: Job) -> str:
    """The noisiest primary decode cell: where the power and tier figures are measured."""
    roles = {m.name: m.role for m in job.models}
    decode = [c.key for c in job.cells if c.metric == "decode" and roles[c.model] == "primary"]
    return max(decode, key=lambda k: job.rule.sd_floors.get(k, job.rule.sd_floor))
