"""The measuring's box-time budget, counted in pairs: `budget_s` buys a number of pairs at the
pace the profile sized it for (`budget_pace_s`), and a slower box gets the same pairs, up to a
hard cap (`max_budget_s`). engine/measure/speed.py applies it once, after the first run's
warm-up; bench/verdict_quality.py simulates it through this same function."""

from __future__ import annotations

from ..contract.job import StoppingRule


def total_s(rule: StoppingRule, main_pace_s: float | None) -> float:
    """The measuring's whole budget (seconds from its start) when main's sample processes take
    `main_pace_s` each: budget_s x max(1, main pace / budget_pace_s), at most max_budget_s, and
    never below budget_s. Only main's pace counts: the PR cannot set it (a slower head only makes
    its own pairs longer). A rule without the two keys, or no pace measured: budget_s."""
    if rule.budget_pace_s is None or rule.max_budget_s is None or not main_pace_s:
        return rule.budget_s
    scaled = rule.budget_s * max(1.0, main_pace_s / rule.budget_pace_s)
    return max(rule.budget_s, min(rule.max_budget_s, scaled))
