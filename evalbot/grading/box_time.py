"""Box time per stage of one evaluation, from its results.

Harnesses since `timing.stages` (docs/contracts.md) record every stage, adding up to the total.
For results of older harnesses the stages are derived from what they did record: the builds'
durations, the sample processes' and the witness processes' wall times, the score processes'
seconds (`correctness.seconds`, since 2026-12-05), and the rest as what is left of the total;
the warm-ups were never recorded (they sit in that rest). Such figures are marked derived, and a
stage nothing tells is unknown (None).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from evalbot.config.errors import ResultsError
from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.results import TIMING_STAGES, upgrade, validate

STAGES = TIMING_STAGES
CORRECTNESS_SIDES = {"correctness_reference": "reference", "correctness_base": "base",
                     "correctness_head": "head"}


@dataclass(frozen=True)
class BoxTime:
    total_s: float | None  # None: the results record no total
    stages: dict[str, float | None]  # every stage of STAGES; None: unknown
    derived: frozenset[str] = frozenset()  # stages derived from an older harness's records

    def largest(self) -> tuple[str, float] | None:
        """The stage that took the most box time. A rest that holds unknown stages is not one
        stage, so it is never the largest."""
        unknown = None in self.stages.values()
        known = {name: s for name, s in self.stages.items()
                 if s is not None and not (name == "rest" and unknown)}
        if not known:
            return None
        name = max(known, key=lambda k: known[k])
        return name, known[name]


def box_time(results: Mapping[str, Any]) -> BoxTime:
    """The stages as the harness recorded them, else as far as they can be derived."""
    timing = results.get("timing") or {}
    return recorded(timing) or _derived(results, _number(timing.get("total_s")))


def recorded(timing: Mapping[str, Any]) -> BoxTime | None:
    """From a results file's `timing` (or a verdict's `provenance.timing`); None without stages."""
    stages = timing.get("stages")
    if not stages:
        return None
    return BoxTime(float(timing["total_s"]), {name: float(stages[name]) for name in STAGES})


def of_document(doc: Any) -> BoxTime:
    """The box time of a parsed JSON document that must be a results file."""
    try:
        results = validate(upgrade(doc))
    except ContractError as exc:
        raise ResultsError(f"not a results file ({exc})") from exc
    return box_time(results)


def _derived(results: Mapping[str, Any], total: float | None) -> BoxTime:
    stages: dict[str, float | None] = dict.fromkeys(STAGES)
    stages["builds"] = sum(_number(results[side].get("duration_s")) or 0.0 for side in ("base", "head"))
    # each sample process once (the cells of one run share it), dropped pairs too: box time spent
    walls = {s.get("seq"): _number(s.get("wall_s")) for c in results["cells"] for s in c["samples"]}
    stages["measuring"] = None if None in walls else _sum(walls.values())
    # a witness's process from start to exit (its clock's seconds before `wall_s` was recorded)
    stages["witnesses"] = _sum(_number(s.get("wall_s", s.get("seconds")))
                               for w in results.get("witnesses") or [] if w["source"] == "witness"
                               for s in w["samples"])
    sections = [results.get("correctness"), *(results.get("correctness_guards") or [])]
    for stage, side in CORRECTNESS_SIDES.items():  # a section without `seconds`: unknown
        stages[stage] = _sum(_number((s.get("seconds") or {}).get(side)) for s in sections if s)
    if total is not None:
        stages["rest"] = max(0.0, total - sum(s or 0.0 for s in stages.values()))
    return BoxTime(total, stages, frozenset(k for k, s in stages.items() if s is not None))


def _sum(values: Iterable[float | None]) -> float | None:
    """The sum, or None when any part is unknown."""
    parts = list(values)
    return None if None in parts else float(sum(p for p in parts if p is not None))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
