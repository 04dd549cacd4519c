"""How each cell decision reads in the comment and on the dashboard: its word, its mark, its
place in the table (slower first). Undecided and not-confirmed have marks that look nothing
alike (issue 48: ❔ and ❓ were two question marks, one rendered pale grey)."""

from __future__ import annotations

UNDECIDED_MARK = "⚖️"  # the evidence weighs both ways: the noise is wider than the change
UNCONFIRMED_MARK = "❓"  # faster by its printed rates; the harness's clock did not confirm it
DECISIONS: dict[str, tuple[str, str, int]] = {
    "regressed": ("slower", "🔻", 0),
    "spoofed": ("speed not believed", "⛔", 0),
    "improved": ("faster", "🟢", 2),
    "unconfirmed": ("faster, not confirmed", UNCONFIRMED_MARK, 3),
    "inconclusive": ("undecided", UNDECIDED_MARK, 4),
    "neutral": ("unchanged", "", 6),
}
UNKNOWN_ORDER = 5  # a decision this module does not know sorts after the undecided ones


def decision_word(decision: str) -> str:
    return DECISIONS.get(decision, (decision.replace("-", " ").replace("_", " "), "", 0))[0]
