"""The GPU fixtures' results files, and what they give besides correctness's costs: a side's
build, the harness's rest between stages, and (older harnesses timed neither) their warm-ups and
score processes. Read by bench/_box_stages.py and bench/_score_cost.py.

Fixtures (GPU_RESULTS): sparkinfer's tests/data/sparkinfer/accept-h100 and accept-h200 (H100 and
H200: 101.7 and 101.3 s for the same 4 Qwythos sweeps), llamacpp's tests/data/llamacpp (H200).
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import numpy as np

from bench import _paces
from evalbot.engine.measure.speed import SIDES
from evalbot.grading.box_time import STAGES, box_time

GPU_RESULTS = {"sparkinfer": ("sparkinfer/accept-h100", "sparkinfer/accept-h200"),
               "llamacpp": ("llamacpp",)}


def warmups_s(warmup: int, pace_s: float) -> float:
    """A run's warm-ups: `warmup` processes per side before its pairs."""
    return warmup * len(SIDES) * pace_s


@cache
def results(fixtures: str) -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(p.read_text()) for folder in GPU_RESULTS[fixtures]
                 for p in sorted((_paces.DATA / folder).glob("*.results.json")))


@cache
def builds_s(fixtures: str) -> float:
    fresh = [doc[side]["duration_s"] for doc in results(fixtures) for side in SIDES
             if not doc[side]["cached"]]
    return len(SIDES) * float(np.mean(fresh))


@cache
def rest_s() -> float:
    """The fixtures' rest where every other stage is known (sparkinfer's: llamacpp's record no
    correctness seconds, so their rest holds the scoring), less their untimed warm-ups."""
    rests = []
    for doc in (d for name in GPU_RESULTS for d in results(name)):
        stages = box_time(doc).stages
        rest = stages["rest"]
        if rest is None or any(stages[k] is None for k in STAGES if k not in ("warmups", "rest")):
            continue
        rests.append(rest - (untimed_warmups_s(doc) if stages["warmups"] is None else 0.0))
    return float(np.mean(rests))


def untimed_scoring_s(doc: dict[str, Any]) -> float:
    """An older fixture's score processes: its rest less its warm-ups and the harness's rest."""
    rest = box_time(doc).stages["rest"]
    assert rest is not None, "a GPU fixture records its total"
    return rest - untimed_warmups_s(doc) - rest_s()


def untimed_warmups_s(doc: dict[str, Any]) -> float:
    """An older harness's warm-ups, timed by nothing: rule.warmup per side of each run, at the
    mean of that run's sample processes (a run's cells share their processes)."""
    runs = {frozenset(s["seq"] for s in c["samples"]): [s["wall_s"] for s in c["samples"]]
            for c in doc["cells"] if c["samples"]}
    return sum(warmups_s(doc["rule"]["warmup"], float(np.mean(w))) for w in runs.values())
