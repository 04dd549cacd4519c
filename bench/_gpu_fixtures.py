"""The GPU fixtures' results files, and what they give besides correctness's costs: a side's
build, the harness's rest between stages, and (older harnesses timed neither) their warm-ups and
score processes. Read by bench/_box_stages.py and bench/_score_cost.py.

Fixtures (GPU_RESULTS): sparkinfer's tests/data/sparkinfer/accept-h100 and accept-h200 (H100 and
H200: 101.7 and 101.3 s for the same 4 Qwythos sweeps; older harnesses, stages derived),
verdict-cost-h100 (H100, the shipped correctness section: an A/A and prefill-4k, every stage
recorded in `timing.stages`) and score-threads-h100 (H100, the same, the score tool reducing on
threads: a broken head, an A/A and prefill-4k); llamacpp's tests/data/llamacpp (H200, stages
derived).

What each figure comes from (a recorded stage wherever a result has one, else derived):
  a build     per freshly built side, pooled over the fixtures of the profile: a result's
              recorded `builds` stage (cache restores included), else its fresh sides'
              `duration_s`, over its fresh sides; a result whose sides the cache served counts
              only the sides it built, so a cached side never lowers the estimate
  rest        the recorded `rest` of the results that record stages (verdict-cost-h100's:
              0.4-0.5 s); the older harnesses' derived rest (derived_rest_s) also held the
              gaps between processes that the stopwatch now charges to their stages, so it
              serves only to take their own rest out of an older result (untimed_scoring_s)
  scoring     an older result without `correctness.seconds` (llamacpp's): its rest less its
              untimed warm-ups and the older harnesses' rest (untimed_scoring_s)
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from typing import Any

import numpy as np

from bench import _paces
from evalbot.engine.measure.speed import SIDES
from evalbot.grading.box_time import STAGES, box_time, recorded

GPU_RESULTS = {"sparkinfer": ("sparkinfer/accept-h100", "sparkinfer/accept-h200",
                              "sparkinfer/verdict-cost-h100", "sparkinfer/score-threads-h100"),
               "llamacpp": ("llamacpp",)}
# the results of the sides' score tool as it is now (bench/_score_cost.py fits a side's cost on
# these alone): sparkinfer's since its positions are reduced on threads of their own
SCORE_TOOL_RESULTS = {"sparkinfer": ("sparkinfer/score-threads-h100",)}


def warmups_s(warmup: int, pace_s: float) -> float:
    """A run's warm-ups: `warmup` processes per side before its pairs."""
    return warmup * len(SIDES) * pace_s


@cache
def results(fixtures: str, folders: tuple[str, ...] | None = None) -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(p.read_text()) for folder in folders or GPU_RESULTS[fixtures]
                 for p in sorted((_paces.DATA / folder).glob("*.results.json")))


def score_tool_results(fixtures: str) -> tuple[dict[str, Any], ...]:
    """The results that time the sides' score tool as it is now (all, where it never changed)."""
    return results(fixtures, SCORE_TOOL_RESULTS.get(fixtures))


def _recorded(doc: dict[str, Any]) -> dict[str, float] | None:
    """The stages the harness recorded (`timing.stages`); None for an older harness's results."""
    got = recorded(doc.get("timing") or {})
    return None if got is None else {k: v for k, v in got.stages.items() if v is not None}


@cache
def build_s(fixtures: str) -> float:
    """One freshly built side: the fixtures' build seconds over their freshly built sides."""
    return per_side_build_s(results(fixtures))


def per_side_build_s(docs: Iterable[dict[str, Any]]) -> float:
    """Build seconds over the sides built: a result's recorded `builds` stage (its cache
    restores included), else its fresh sides' `duration_s`; a side the cache served counts
    neither seconds nor a side."""
    seconds, sides = 0.0, 0
    for doc in docs:
        fresh = [s for s in SIDES if not doc[s]["cached"]]
        if not fresh:
            continue
        stages = _recorded(doc)
        seconds += stages["builds"] if stages else sum(doc[s]["duration_s"] for s in fresh)
        sides += len(fresh)
    return seconds / sides


def builds_s(fixtures: str) -> float:
    """Both sides built fresh (a box whose cache holds main's build pays build_s once)."""
    return len(SIDES) * build_s(fixtures)


@cache
def rest_s() -> float:
    """The harness's rest: the mean recorded `rest` of every profile's fixtures that record
    their stages; the older harnesses' derived rest where none does."""
    rests = [s["rest"] for name in GPU_RESULTS for d in results(name)
             if (s := _recorded(d)) is not None]
    return float(np.mean(rests)) if rests else derived_rest_s()


@cache
def derived_rest_s() -> float:
    """The older harnesses' rest where every other stage is known (sparkinfer's: llamacpp's
    record no correctness seconds, so their rest holds the scoring), less their untimed
    warm-ups: what was left between the processes they timed."""
    rests = []
    for doc in (d for name in GPU_RESULTS for d in results(name) if _recorded(d) is None):
        stages = box_time(doc).stages
        rest = stages["rest"]
        if rest is None or any(stages[k] is None for k in STAGES if k not in ("warmups", "rest")):
            continue
        rests.append(rest - (untimed_warmups_s(doc) if stages["warmups"] is None else 0.0))
    return float(np.mean(rests))


def untimed_scoring_s(doc: dict[str, Any]) -> float:
    """An older fixture's score processes: its rest less its warm-ups and the older harnesses'
    rest (derived_rest_s: the same harnesses' gaps)."""
    rest = box_time(doc).stages["rest"]
    assert rest is not None, "a GPU fixture records its total"
    return rest - untimed_warmups_s(doc) - derived_rest_s()


def untimed_warmups_s(doc: dict[str, Any]) -> float:
    """An older harness's warm-ups, timed by nothing: rule.warmup per side of each run, at the
    mean of that run's sample processes (a run's cells share their processes)."""
    runs = {frozenset(s["seq"] for s in c["samples"]): [s["wall_s"] for s in c["samples"]]
            for c in doc["cells"] if c["samples"]}
    return sum(warmups_s(doc["rule"]["warmup"], float(np.mean(w))) for w in runs.values())
