"""How each cell decision reads in the comment and on the dashboard: its word, its mark, its
place in the table (slower first). Undecided and not-confirmed have marks that look nothing
alike (issue 48: ❔ and ❓ were two question marks, one rendered pale grey)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalbot.grading.unexplained_cost import CAPPED

UNDECIDED_MARK = "⚖️"  # the evidence weighs both ways: the noise is wider than the change
UNCONFIRMED_MARK = "❓"  # faster by its printed rates; the harness's clock did not confirm it
DECISIONS: dict[str, tuple[str, str, int]] = {
    "regressed": ("slower", "🔻", 0),
    "spoofed": ("speed not believed", "⛔", 0),
    "improved": ("faster", "🟢", 2),
    "unconfirmed": ("faster, not confirmed", UNCONFIRMED_MARK, 3),
    "unbelieved": ("not believed", UNCONFIRMED_MARK, 3),  # shown_decision: held for time
    "inconclusive": ("undecided", UNDECIDED_MARK, 4),
    "neutral": ("unchanged", "", 6),
}
UNKNOWN_ORDER = 5  # a decision this module does not know sorts after the undecided ones


def decision_word(decision: str) -> str:
    return DECISIONS.get(decision, (decision.replace("-", " ").replace("_", " "), "", 0))[0]


def shown_decision(cell: Mapping[str, Any]) -> str:
    """The decision as the comment shows it: an `unconfirmed` cell held for time the harness
    measured (issue 53: its witness could not rule out a slowdown, none timed it, or its run's
    time is unaccounted for) was not printed faster, so it reads "not believed", not "faster,
    not confirmed" (a GPU run's A/A showed two unchanged cells as faster)."""
    if cell["decision"] == "unconfirmed" and cell.get("confirmation") in CAPPED:
        return "unbelieved"
    return str(cell["decision"])


WALL_CLOCK_MARK = "ʷ"  # an unchanged cell no witness timed: ruled in by its run's wall clock


def wall_clock_only(cell: Mapping[str, Any], verdict: Mapping[str, Any]) -> bool:
    """An unchanged cell no witness ruled in, where the rule times every covered cell (issue
    53), since none covers it (the profile's "regressions only" cells): its run's wall clock
    ruled out the witness margin of its work (evalbot/grading/unexplained_cost.py), where a
    cell it could not rule in is not believed. The comment says which clock it was."""
    rule = (verdict.get("provenance") or {}).get("rule") or {}
    if not rule.get("witness_every_cell") or cell["decision"] != "neutral":
        return False
    return not any((w.get("cells") or {}).get(cell["key"], {}).get("ruled_out")
                   for w in verdict.get("witnesses") or [] if w.get("source", "witness") == "witness")
