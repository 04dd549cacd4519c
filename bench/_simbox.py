"""A simulated box for the real harness: `engine.measure.speed.Measurement` with its processes
replaced, so the harness's own scheduling (warm-ups, ABBA pairs, looks, the budget, the samples'
checks, the witnesses' order, allowances and stops) runs on drawn processes, and the bot's own
grading (`evalbot.grading.grade.grade`) judges the results document built as
engine/harness/steps.py builds it.

Only three methods are replaced: `now` (a virtual clock that each simulated process advances by
its wall time), `_sample` (one sample process: rates drawn about the fixture's true rates with
its per-process noise, its wall time the fixed part plus the work at the side's real rates) and
`_timed` (one witness process: its clock's seconds and wall time from the witness fixture, its
output ids printed in the spec's own output format for the harness's own reader). Paces and
noise come from bench/_paces.py.
"""

from __future__ import annotations

import contextlib
import json
import math
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from bench import _h100_noise, _paces, _stress
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract import witness_spec
from evalbot.engine.contract.job import Cell, Job, SpeedRun
from evalbot.engine.contract.witness_spec import WitnessSpec
from evalbot.engine.harness.steps import _failure
from evalbot.engine.measure import witness
from evalbot.engine.measure.speed import SIDES, Measurement, SampleFailure
from evalbot.engine.sides.build import Built
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import Profile, load_profile
from evalbot.grading.grade import RANK, grade
from evalbot.grading.policy import TIER_ORDER, Policy, load_labels

ROOT = Path(__file__).resolve().parents[1]
POLICY: Policy = load_labels(ROOT / "labels.yaml").policy("default")
BASE_SHA, HEAD_SHA = "0" * 40, "1" * 40
ID_SPACE = 1 << 20  # output ids a simulated witness prints (any vocabulary's size would do)
# a stepped witness's output line (engine/contract/witness_spec.py; the default keeps the bench
# running on a harness from before the stepped protocol)
STEP = getattr(witness_spec, "STEP", "EVALBOT_STEP ")
FAULTS = ("", "slow first", "throttle")  # World.fault
DEMO_LOAD_S = 0.3  # a demo witness process's start-up and model (evalbot/profiles/demo.yaml)


@dataclass(frozen=True)
class Head:
    """A head of the table: its true speed-ups, what its printed rates add to them, and its
    witness output (a share of ids invented, or numerics that pick another argmax now and then).
    """

    name: str
    real: dict[str, float] = field(default_factory=dict)  # cell key -> true rate factor
    printed: dict[str, float] = field(default_factory=dict)  # cell key -> factor printed beyond
    agreement: float = 1.0  # share of its witness's output ids it computes; the rest invented
    # share of steps where its numerics pick main's runner-up (bf16-level): at main's near ties
    flips: float = 0.0
    true_tier: str | None = None  # the tier its true gain earns; None: none (liars, A/A)
    honest: bool = True
    # its witness reads ahead (issue 29's batching attack): on the stepped protocol the next id
    # comes only after its answer, so it waits until the witness's timeout and is killed
    reads_ahead: bool = False

    def sample_factor(self, cell: Cell) -> float:
        """Its real speed-up of a sample's work: a junk tail's bench skips the decode work its
        witness invents, and prints rates true to the work it did."""
        skipped = self.agreement if cell.metric == "decode" else 1.0
        return self.real.get(cell.key, 1.0) / skipped


@dataclass(frozen=True)
class World:
    """What the simulated box's processes cost: a profile's fixtures, or every sample process
    at `pace_s` (the same rates and noise, a longer fixed part)."""

    fixtures: str  # the shipped profile whose fixtures apply (bench/_paces.py)
    pace_s: float | None = None  # None: the measured pace
    fault: str = ""  # a fault of the box's processes (FAULTS), both sides and warm-ups alike
    box: str = ""  # another box's witness noise (bench/_h100_noise.py BOXES); "": the fixtures'

    def fault_factors(self, run: SpeedRun, rng: np.random.Generator) -> list[float]:
        """Per cell of one process, the factor the box's fault puts on its rate: "slow first",
        the process's first test 10% slow in a third of the processes (unless the profile
        throws the first tests away: its parse's discard_first); "throttle", every cell 5%
        slow in 5% of the processes, unflagged (bench/_stress.py's stresses)."""
        out = [1.0] * len(run.cells)
        if self.fault == "slow first" and not run.parse.get("discard_first") and \
                rng.random() < _stress.SLOW_SHARE:
            out[0] = _stress.SLOW_FACTOR
        elif self.fault == "throttle" and rng.random() < _stress.THROTTLE_SHARE:
            out = [_stress.THROTTLE_FACTOR] * len(out)
        elif self.fault not in FAULTS:
            raise ValueError(f"unknown fault {self.fault!r}: one of {FAULTS}")
        return out

    def run(self, run: SpeedRun) -> _paces.RunPace:
        return _paces.run_pace(self.fixtures, run.model, {c.ctx for c in run.cells})

    def sample_s(self, run: SpeedRun) -> float:
        return self.pace_s or self.run(run).seconds

    def witness(self, run: SpeedRun, spec: WitnessSpec) -> _paces.WitnessPace:
        if self.fixtures == "demo":
            return self._demo_witness(run, spec)
        return _h100_noise.witness(self.box, _paces.witness_pace(self.fixtures, run.model, spec),
                                   spec, self.fixtures)

    def _demo_witness(self, run: SpeedRun, spec: WitnessSpec) -> _paces.WitnessPace:
        """The demo's driver calls the very `forward` its bench times: its work is the covered
        cells' tokens at the neutral fixture's rates, its load the interpreter, numpy and the
        model (0.3 s of CPU a process, evalbot/profiles/demo.yaml), and a pair's sd the
        witness's floor in the profile (its cpu clock beside 4 busy loops on a 2-core machine,
        `scripts/demo_witness_floor.py`): there is no witness fixture."""
        pace = self.run(run)
        cells = {c.key: c for c in run.cells}
        work = sum(t / rate(pace, cells[k]) for k, t in spec.cells.items())
        return _paces.WitnessPace(work, work + DEMO_LOAD_S, DEMO_LOAD_S, spec.sd_floor_s,
                                  0.1 * DEMO_LOAD_S, "demo: the profile's witness floors")


def rate(pace: _paces.RunPace, cell: Cell) -> float:
    """main's true rate of a cell (by metric@ctx, else by metric alone)."""
    return pace.rates.get(f"{cell.metric}@{cell.ctx}") or pace.rates[cell.metric]


def noise(pace: _paces.RunPace, cell: Cell) -> float:
    return pace.noise.get(f"{cell.metric}@{cell.ctx}") or pace.noise[cell.metric]


class SimulatedBox(Measurement):
    """The harness's Measurement on a box of drawn processes (module docstring)."""

    def __init__(self, job: Job, world: World, head: Head, rng: np.random.Generator,
                 workdir: Path) -> None:
        self.clock = 0.0  # before Measurement's __init__: it reads now() for the deadline
        built = {s: Built(s, BASE_SHA if s == "base" else HEAD_SHA, True, 0.0, False, workdir)
                 for s in SIDES}
        super().__init__(job, built, workdir, workdir)
        self.world, self.head, self.rng = world, head, rng
        # the warm-ups' share of measured_s: the harness times them as a stage of their own
        self.warmup_s = 0.0
        self.warmed: set[int] = set()  # the runs whose warm-ups began (a failure ends the rest)
        self.run_of = {spec.name: run for run in job.runs for spec in run.witnesses}

    def now(self) -> float:
        return self.clock

    def _sample(self, run: SpeedRun, side: str, warmup: bool = False) -> tuple[dict, bool]:
        self.seq += 1
        pace, head = self.world.run(run), side == "head"
        printed, work = {}, 0.0
        for cell, fault in zip(run.cells, self.world.fault_factors(run, self.rng), strict=True):
            real = rate(pace, cell) * fault * math.exp(self.rng.normal(0.0, noise(pace, cell)))
            real *= self.head.sample_factor(cell) if head else 1.0
            printed[cell.key] = real * (self.head.printed.get(cell.key, 1.0) if head else 1.0)
            work += self._tokens(run, cell) / real
        wall = max(self._fixed_s(run) + self.rng.normal(0.0, pace.jitter_s), 0.0) + work
        self.measured_s += wall
        if warmup:
            self.warmup_s += wall
            self.warmed.add(id(run))
        self.clock += wall
        self._check_timing(run, printed, wall, side, self.jobdir / "sim.log")  # the harness's
        return {key: {"side": side, "seq": self.seq, "value": value, "wall_s": round(wall, 4),
                      "gpu_before": None, "gpu_after": None, "throttled": False}
                for key, value in printed.items()}, False

    def _fixed_s(self, run: SpeedRun) -> float:
        """A sample process's part outside the work its rates time (load, untimed fills)."""
        pace = self.world.run(run)
        main_work = sum(self._tokens(run, c) / rate(pace, c) for c in run.cells)
        return self.world.sample_s(run) - main_work

    def _timed(self, side: str, argv: list[str], timeout_s: float, prompt: list[int],
               spec: WitnessSpec) -> witness.Timed:
        self.seq += 1
        if side == "head" and self.head.reads_ahead and spec.steps:
            self.clock += spec.timeout_s
            return witness.Timed(False, "", spec.timeout_s, False, "timed out", spec.timeout_s)
        run = self.run_of[spec.name]
        pace = self.world.witness(run, spec)
        work = self._witness_work_s(run, spec, pace, side == "head")
        work += self.rng.normal(0.0, pace.pair_sd_s / math.sqrt(2))
        load = max(pace.load_s + self.rng.normal(0.0, pace.wall_jitter_s), 0.0)
        # a wall clock counts the load; the handoff and the (stepped) cpu clocks time the work
        seconds = work + load if spec.clock == "wall" else work
        self.clock += work + load
        ids = output_ids(spec, prompt, self.head if side == "head" else None, self.rng)
        return witness.Timed(True, render(spec.output, ids), seconds, False, "", work + load)

    def _witness_work_s(self, run: SpeedRun, spec: WitnessSpec, pace: _paces.WitnessPace,
                        head: bool) -> float:
        """main's measured work: each covered cell's tokens at its sample rate (scaled down
        where they exceed the measured work), the rest the tool's fixed part and uncredited
        decode-path steps (a prefill witness's continuation, a generate tool's prompt). The
        head's: each cell's part at its true gain less the decode steps whose ids it invents,
        the steps at its decode gain at the witness's context, the fixed part as main's."""
        cells = {c.key: c for c in run.cells}
        total = pace.wall_s - pace.load_s
        share = {k: t / rate(self.world.run(run), cells[k]) for k, t in spec.cells.items()}
        scale = min(1.0, total / sum(share.values()))
        rest = total - scale * sum(share.values())
        if not head:
            return total
        fixed = min(pace.fixed_s, rest)
        out = fixed + (rest - fixed) / self._decode_gain(run, spec)
        for k, main_s in share.items():
            cell = cells[k]
            invented = (1 - self.head.agreement) * min(1.0, spec.output_tokens / spec.cells[k]) \
                if cell.metric == "decode" else 0.0
            out += scale * main_s / self.head.real.get(cell.key, 1.0) * (1 - invented)
        return out

    def _decode_gain(self, run: SpeedRun, spec: WitnessSpec) -> float:
        """The head's true decode factor at the context nearest the witness's deepest cell."""
        deepest = max(int(k.rsplit("@", 1)[1]) for k in spec.cells)
        decode = [c for c in run.cells if c.metric == "decode"]
        if not decode:
            return 1.0
        near = min(decode, key=lambda c: abs(c.ctx - deepest))
        return self.head.real.get(near.key, 1.0)


# main's steps whose top two logits are within its witness's tie_margin: the only steps where
# bf16-level noise can flip an argmax (a head's `flips` happen there). 5% is below what the
# synthetic Qwythos shows (20% within 0.05, tests/data/sparkinfer/score-short-*.log: random
# weights give flat logits), so a 1% flip rate is a fifth of main's near ties.
NEAR_TIES = 0.05


@dataclass(frozen=True)
class Printed:
    """A witness process's output: its ids and, on a stepped witness, each step's runner-up id
    and top-1 minus top-2 margin (the base side's are main's; the head's are claims)."""

    ids: list[int]
    runner_up: list[int] | None = None
    margin: list[float] | None = None


def output_ids(spec: WitnessSpec, prompt: list[int], head: Head | None,
               rng: np.random.Generator) -> Printed:
    """main's ids, runners-up and margins for this prompt (a function of it); a head's ids
    differ where it invents (the tail: a guess that is neither main's id nor its runner-up) or
    where its numerics flip an argmax, which happens only at main's near ties and picks main's
    runner-up: at that step alone when every step's input is given (teacher-forced), from there
    on when the witness decodes freely. A head prints its own id as its runner-up at margin 0
    (a claim the harness must ignore)."""
    n, stepped = spec.output_tokens, spec.output.get("kind") == "step_lines"
    main = np.random.default_rng(zlib.crc32(np.asarray(prompt, dtype=np.int64).tobytes()))
    ids = main.integers(0, ID_SPACE, n)
    tied = main.random(n) < NEAR_TIES
    runner_up = (ids + 2) % ID_SPACE
    if head is None:
        margin = np.where(tied, spec.tie_margin / 2, 1.0)
        return Printed(ids.tolist(), *((runner_up.tolist(), margin.tolist()) if stepped else ()))
    wrong = np.zeros(n, dtype=bool)
    wrong[round(head.agreement * n):] = True
    # where numerics flip is a function of the prompt, as on a GPU (the same prompt flips the
    # same steps), and draws nothing from `rng`: a bf16 head and its exact twin, seeded alike
    # (bench/_rows.py), then see the same box and differ only in these flips
    flip_draw = np.random.default_rng([zlib.crc32(np.asarray(prompt, dtype=np.int64).tobytes()), 1])
    flipped = tied & (flip_draw.random(n) < head.flips / NEAR_TIES) if head.flips \
        else np.zeros(n, dtype=bool)
    if not teacher_forced(spec) and flipped.any():
        wrong[int(np.argmax(flipped)):] = True  # a free-running decode diverges
    got = np.where(wrong, (ids + 1) % ID_SPACE, np.where(flipped, runner_up, ids))
    return Printed(got.tolist(), *((got.tolist(), [0.0] * n) if stepped else ()))


def teacher_forced(spec: WitnessSpec) -> bool:
    """Is every step's input given? The stepped protocol's outputs, or a prompt that holds
    every token of the witness's work (prefill and forced decode steps)."""
    return spec.output.get("kind") == "step_lines" or \
        spec.prompt_tokens >= sum(spec.cells.values())


def render(how: dict[str, Any], printed: Printed | list[int]) -> str:
    """What the witness process prints, in the spec's output kind, for the harness's reader
    (engine.measure.witness_output.read_output_ids)."""
    out = printed if isinstance(printed, Printed) else Printed(list(printed))
    ids, kind, prefix = out.ids, how["kind"], str(how.get("prefix", ""))
    if kind == "ids_line":
        return f"{prefix}{' '.join(map(str, ids))}\n"
    if kind == "step_lines":
        if out.runner_up is None or out.margin is None:
            return "".join(f"{STEP}{i}\n" for i in ids)
        return "".join(f"{STEP}{i} {r} {m:g}\n"
                       for i, r, m in zip(ids, out.runner_up, out.margin, strict=True))
    if kind == "score_lines":
        return "".join(f"S i={n} am={i} lp=0\n" for n, i in enumerate(ids))
    doc: Any = ids
    for part in reversed(str(how["path"]).split(".")):
        doc = {part: doc}
    return f"{prefix}{json.dumps(doc)}\n"


@dataclass(frozen=True)
class Outcome:
    tier: str | None
    kind: str
    measure_s: float  # every sample process, warm-ups included (the budget counts them)
    witness_s: float
    warmup_s: float  # the warm-ups' part of measure_s
    scored: bool  # no failure stopped it: the harness scores correctness only then (steps.py)
    runs: int  # the job's runs it reached (they run in order)
    # each cell's decision and confirmation (bench/hidden_cost.py: which cells were caught)
    cells: tuple[tuple[str, str, str], ...] = ()


class Evaluator:
    """Whole evaluations of one profile's job on a World: the harness, then the grading."""

    def __init__(self, profile: Profile, world: World, workdir: Path) -> None:
        self.profile, self.world, self.workdir = profile, world, workdir
        box = BoxConfig(name="sim", kind="local", workdir=str(workdir), repo=str(workdir))
        floors, df = _h100_noise.calibrated(world.box, list(profile.runs), world.witness)
        self.job = make_job(replace(profile, correctness=None), POLICY, box, BASE_SHA,
                            HEAD_SHA, seed=1, job_id="sim", sd_floors=floors, witness_df=df)

    @cached_property
    def header(self) -> dict[str, Any]:
        """The results' fields besides cells, witnesses and failures (steps.py `_header`)."""
        return {"schema": "evalbot.results/1", "job_id": self.job.job_id,
                "profile": self.job.profile, "harness_version": "sim", "merge_base": None,
                "box": {"name": "sim"}, "rule": asdict(self.job.rule),
                "models": [asdict(m) for m in self.job.models], "correctness": None,
                "base": {"sha": BASE_SHA}, "head": {"sha": HEAD_SHA}}

    def evaluate(self, head: Head, rng: np.random.Generator) -> Outcome:
        box = SimulatedBox(self.job, self.world, head, rng, self.workdir)
        failures = []
        try:
            box.run_all()
        except SampleFailure as exc:  # as engine/harness/steps.py records it
            failures.append(_failure("speed", exc.side, exc.kind, exc.message, None))
        results = {**self.header, "cells": [r.to_dict() for r in box.records.values()],
                   "witnesses": box.witness_dicts(), "failures": failures}
        verdict = grade(results, POLICY)
        return Outcome(verdict["tier"], verdict["kind"], box.measured_s, box.witnessed_s,
                       box.warmup_s, not failures, len(box.warmed),
                       tuple((c["key"], c["decision"], c.get("confirmation", ""))
                             for c in verdict["cells"]))


@contextlib.contextmanager
def seeded_prompts(seed: int) -> Iterator[None]:
    """The harness draws each witness prompt from the OS's entropy (engine/measure/witness.py
    `_prompt`, through `secrets`); here from a seeded generator instead, so a bench run can be
    repeated, and fast (the OS's draw per id was 70% of a simulated evaluation's time). A
    simulated process's cost does not depend on the ids' values, only on their count."""
    real = witness.secrets
    witness.secrets = _SeededIds(seed)  # type: ignore[assignment]
    try:
        yield
    finally:
        witness.secrets = real


class _SeededIds:
    """`secrets.randbelow` from a seeded pool of uniforms (one numpy call per 65,536 ids)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.pool: list[float] = []

    def randbelow(self, n: int) -> int:
        if not self.pool:
            self.pool = self.rng.random(1 << 16).tolist()
        return int(self.pool.pop() * n)


def true_tier(metric: str, gain: float) -> str | None:
    """The tier a true rate gain earns under the policy, as grading tiers it (prefill by the
    reduction of the time to first token)."""
    value = 1 - 1 / (1 + gain) if metric == "prefill" else gain
    return next((t for t in TIER_ORDER if value >= POLICY.tiers[t]), None)


def higher(tier: str | None, than: str | None) -> bool:
    return RANK.get(tier or "none", 0) > RANK.get(than or "none", 0)


def one_model(profile: Profile, model: str) -> Profile:
    """The profile with one model's runs only (its family of cells shrinks with it)."""
    return replace(profile, name=f"{profile.name} ({model} only)",
                   models=tuple(m for m in profile.models if m.name == model),
                   runs=tuple(r for r in profile.runs if r.model == model))


def shipped(name: str) -> Profile:
    return load_profile(name)
