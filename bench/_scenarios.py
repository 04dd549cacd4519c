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
# the shipped profile's own A/A on the H200: 21 pairs of its exact argv (-r 3, median), both sides
# main. Its decode floors once came from single repetitions (tests/data/fixtures/
# h200-aa-single-rep.json), twice this A/A's per-pair sd: the rule paid 2-4x the pairs for it
SHIPPED_AA = ROOT / "tests" / "data" / "llamacpp" / "h200-aa.results.json"
SHA = "0" * 40
# The shipped A/A's scored (second) pp4096 test at depth 0 ran ~36.5k tok/s in 24 of 42
# processes against ~41k, on both sides alike; the profile dropped that cell
# (evalbot/profiles/llamacpp.yaml) with this floor
PREFILL0 = ProfileCell("prefill", 0, sd_floor=0.0097)
STRESSES = ("slow first", "throttle", "t(3) tails", "drift")


@dataclass(frozen=True)
class Scenario:
    name: str
    profile: str
    noise: Noise
    calibrated_sd: float = 0.0  # > 0: floors a calibration at this per-pair sd would store
    score_prefill0: bool = False  # llamacpp: score depth-0 prefill again (the profile before)
    target: float = 0.05  # the effect power must reach 95% at
    measured: bool = False  # the profile's measured noise (the others: stresses, other noises)


def shipped_aa() -> Noise:
    """Resampled pairs of the shipped A/A (SHIPPED_AA): each simulated pair is one measured pair,
    every cell of its two processes together, its sides swapped half the time (an A/A has no
    direction) and each cell's mean log-ratio taken out (the truth of an A/A is 0). The drift of
    the box between a pair's processes stays in it, as measured; depth-0 prefill keeps its
    bimodal copy (~36.5k or ~41k tok/s by process)."""
    base, head, keys = _aa_pairs()

    def draw(rng: np.random.Generator, sims: int, procs: int, _: int, run: SpeedRun) -> np.ndarray:
        cols = [keys.index(f"{c.metric}@{c.ctx}") for c in run.cells]
        pairs = procs // 2
        pick = rng.integers(0, len(base), size=(sims, pairs))
        swap = rng.random((sims, pairs, 1)) < 0.5
        b, h = base[pick][..., cols], head[pick][..., cols]  # (sims, pairs, cells)
        b, h = np.where(swap, h, b), np.where(swap, b, h)
        even = (np.arange(pairs) % 2 == 0)[None, :, None]  # ABBA: base first in even pairs
        first, second = np.where(even, b, h), np.where(even, h, b)
        x = np.stack([first, second], axis=2).reshape(sims, 2 * pairs, len(cols))
        return np.moveaxis(x, 2, 1).copy()
    return draw


def _aa_pairs() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(base, head) log rates per pair and cell of SHIPPED_AA, the head's centred on the base's."""
    doc = json.loads(SHIPPED_AA.read_text())
    keys = [f"{c['metric']}@{c['ctx']}" for c in doc["cells"]]
    sides: dict[str, list[list[float]]] = {"base": [], "head": []}
    for side in sides:
        for c in doc["cells"]:
            kept = sorted((s["pair"], s["value"]) for s in c["samples"]
                          if s["side"] == side and not s["dropped"])
            sides[side].append([math.log(v) for _, v in kept])
    base, head = (np.array(sides[k]).T for k in ("base", "head"))  # (pairs, cells)
    return base - base.mean(axis=0), head - head.mean(axis=0), keys


def scenarios() -> list[Scenario]:
    """Each profile at its measured noise, then the stresses (bench/_stress.py) on it."""
    h200, spark = shipped_aa(), normal(0.0025)
    return [
        Scenario("H200 A/A", "llamacpp", h200, measured=True),
        Scenario("H200 +slow first", "llamacpp", _stress.slow_first(h200)),
        Scenario("H200 prefill@0 kept", "llamacpp", h200, score_prefill0=True),
        Scenario("H200 +throttle", "llamacpp", _stress.throttle(h200)),
        Scenario("H200 +t(3) tails", "llamacpp", _stress.tails(h200)),
        Scenario("H200 +drift", "llamacpp", _stress.drift(h200, 0.01)),
        Scenario("H200 stale 2x", "llamacpp", _stress.scaled(h200, 2.0)),
        Scenario("generic 1%", "llamacpp", normal(0.01), calibrated_sd=math.sqrt(2) * 0.01),
        Scenario("generic 2%", "llamacpp", normal(0.02), calibrated_sd=math.sqrt(2) * 0.02),
        Scenario("spark 0.05%", "sparkinfer", normal(0.0005), target=0.03),
        Scenario("spark 0.25%", "sparkinfer", spark, target=0.03, measured=True),
        Scenario("spark +slow first", "sparkinfer", _stress.slow_first(spark), target=0.03),
        Scenario("spark +throttle", "sparkinfer", _stress.throttle(spark), target=0.03),
        Scenario("spark +t(3) tails", "sparkinfer", _stress.tails(spark), target=0.03),
        Scenario("spark +drift", "sparkinfer", _stress.drift(spark, 0.0025), target=0.03),
        Scenario("spark stale 2x", "sparkinfer", normal(0.005), target=0.03),
        Scenario("spark 1% (stale 4x)", "sparkinfer", normal(0.01), target=0.03),
        Scenario("demo 3% pair", "demo", normal(0.03 / math.sqrt(2)), target=0.5),
    ]


def stresses(profile: str) -> list[Scenario]:
    """The stresses the rule must survive on `profile` (issue 46: a slow first test, a silent
    throttle; and the t(3) tails and the drift of issue 33), on its measured noise."""
    return [sc for sc in scenarios() if sc.profile == profile
            and any(word in sc.name for word in STRESSES)]


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
