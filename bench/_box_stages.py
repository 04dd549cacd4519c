"""Box seconds per stage of one evaluation, modelled: the stages of the results' `timing`
(engine/harness/stopwatch.py, docs/contracts.md) for the benches' simulated evaluations.

  builds       2 sides x a freshly built side, pooled over the GPU fixtures (their recorded
               `builds` stage where they have one, over the sides they built: a side the build
               cache served is left out; a box holding main's build saves one of the two)
  warmups      the job's rule.warmup x 2 sides x each run's sample pace (bench/_paces.py, or
               the pace a bench gives), for the runs the evaluation reached
  measuring, witnesses   the simulated evaluation's sample processes (warm-ups apart) and
               witness processes, start to exit (bench/_simbox.py)
  correctness_base, _head   the profile's correctness section's rounds, each side's score
               processes per window (bench/_score_cost.py), in the evaluations that reached it
  correctness_reference  0 on a warmed box (its cache holds every window); cold, its own score
               processes (bench/_score_cost.py)
  rest         the harness's rest as the fixtures that record their stages give it

The GPU fixtures: bench/_gpu_fixtures.py. Shared by bench/verdict_quality.py and
bench/spoof_quality.py (through bench/_rows.py) and bench/box_time.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench import _score_cost
from bench._gpu_fixtures import builds_s, rest_s, warmups_s
from bench._simbox import World
from evalbot.engine.contract.job import Job
from evalbot.engine.measure.speed import SIDES
from evalbot.evaluation.profile import Profile


@dataclass(frozen=True)
class Stages:
    seconds: dict[str, float]  # every stage of STAGES

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


@dataclass(frozen=True)
class Evaluation:
    """One profile variant's modelled stages; the measuring and witnesses come from a simulation."""

    builds_s: float
    warmups: tuple[float, ...]  # each run's, in the job's order
    rest_s: float
    side_rounds: tuple[float, ...]  # one side's correctness seconds per round, all scored models
    reference_rounds: tuple[float, ...]  # the reference's per round, cold

    def reference_s(self, rounds: int) -> float:
        return sum(self.reference_rounds[:rounds])

    def stages(self, measuring_s: float, witnesses_s: float, rounds: int = 1,
               warm: bool = True, scored: float = 1.0,
               reached: dict[int, float] | None = None) -> Stages:
        """`rounds` of correctness in a `scored` share of the evaluations, the warm-ups of the
        runs they `reached` ({runs: share}; all of them by default): a failure in the measuring,
        a head's spoofed samples among them, ends an evaluation there."""
        side = scored * sum(self.side_rounds[:rounds])
        warmups = sum(share * sum(self.warmups[:runs])
                      for runs, share in (reached or {len(self.warmups): 1.0}).items())
        return Stages({"builds": self.builds_s, "warmups": warmups,
                       "measuring": measuring_s, "witnesses": witnesses_s,
                       "correctness_reference": 0.0 if warm else scored * self.reference_s(rounds),
                       "correctness_base": side, "correctness_head": side, "rest": self.rest_s})


def evaluation(profile: Profile, fixtures: str, job: Job, world: World) -> Evaluation:
    """`profile` as simulated (a shipped one, one model of it, or one a bench is given) with
    `fixtures`' figures: its own correctness section, runs and warm-ups."""
    spec = _score_cost.correctness(profile)
    plan = _score_cost.rounds(spec) if spec else [[]]
    models = _score_cost.scored_models(profile)
    side = tuple(sum(_score_cost.side_round_s(fixtures, profile, m, r) for m in models)
                 for r in plan)
    ref = tuple(sum(_score_cost.reference_round_s(fixtures, profile, m, r) for m in models)
                for r in plan)
    warm = tuple(warmups_s(job.rule.warmup, world.sample_s(run)) for run in job.runs)
    return Evaluation(builds_s(fixtures), warm, rest_s(), side, ref)


def pairs_s(pairs: Any, pace_s: float) -> Any:
    """A run's measuring: a process per side per pair (numbers or numpy arrays of pairs)."""
    return pairs * len(SIDES) * pace_s


