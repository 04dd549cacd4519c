"""Box time in words, for a comment's details and the dashboard's recent verdicts ("box time
9 min 10 s, largest: correctness (reference) 5 min 20 s"), and the stage names that
`evalbot box-time` prints."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalbot.grading.box_time import recorded

WORDS = {"builds": "builds", "warmups": "warm-ups", "measuring": "measuring",
         "witnesses": "witnesses", "correctness_reference": "correctness (reference)",
         "correctness_base": "correctness (main)", "correctness_head": "correctness (PR)",
         "rest": "rest"}


def summary(verdict: Mapping[str, Any], results: Mapping[str, Any] | None = None) -> str:
    """`9 min 10 s, largest: correctness (reference) 5 min 20 s`: the evaluation's box time and
    its largest stage as the harness recorded them (the verdict's provenance, else the
    results); the total alone from an older harness; "" when nothing records it."""
    timing = (verdict.get("provenance") or {}).get("timing") or (results or {}).get("timing") or {}
    total = timing.get("total_s")
    if not isinstance(total, (int, float)):
        return ""
    figures = recorded(timing)
    largest = figures.largest() if figures else None
    if largest is None:
        return duration(total)
    return f"{duration(total)}, largest: {WORDS[largest[0]]} {duration(largest[1])}"


def duration(seconds: float) -> str:
    """As people say it: `4.2 s`, `42 s`, `9 min 10 s`, `2 h 05 min`."""
    if round(seconds, 1) < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
