"""Admission as a table: write access or the approval label, then per-author and per-PR quotas."""

from __future__ import annotations

import pytest

from evalbot.github.admission import Facts, Quotas, decide, rerun_allowed

Q = Quotas(per_author_per_day=3, per_pr_per_day=2)


@pytest.mark.parametrize(("facts", "admit", "says"), [
    (Facts(True, False, 0, 0), True, "admitted"),
    (Facts(False, False, 0, 0), False, "evalbot-approved"),
    (Facts(False, True, 0, 0), True, "admitted"),
    (Facts(True, False, 3, 0), False, "author quota"),
    (Facts(False, True, 2, 2), False, "PR quota"),
    (Facts(True, False, 2, 1), True, "admitted"),
])
def test_decide_table(facts: Facts, admit: bool, says: str) -> None:
    decision = decide(facts, Q, "evalbot-approved")
    assert decision.admit is admit and says in decision.reason


def test_zero_quota_means_unlimited() -> None:
    assert decide(Facts(True, False, 10**6, 10**6), Quotas(0, 0), "ok").admit


@pytest.mark.parametrize(("can_write", "evaluated", "allowed"), [
    (True, True, True), (True, False, True), (False, False, True), (False, True, False)])
def test_rerun_of_unchanged_head_is_for_maintainers(can_write: bool, evaluated: bool,
                                                    allowed: bool) -> None:
    assert rerun_allowed(can_write, evaluated) is allowed
