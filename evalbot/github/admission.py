"""Who gets box time: write access or a maintainer's approval label, within daily quotas.

A pure decision over facts the handler gathered (permission, labels, counts from the store).
"""

from __future__ import annotations

from dataclasses import dataclass

DAY_S = 86400.0


@dataclass(frozen=True)
class Quotas:
    per_author_per_day: int  # 0: unlimited
    per_pr_per_day: int


@dataclass(frozen=True)
class Facts:
    author_can_write: bool
    approved: bool  # the approval label is on the PR
    author_today: int  # evaluations admitted for this author in the last 24 h
    pr_today: int  # ... and for this PR


@dataclass(frozen=True)
class Decision:
    admit: bool
    reason: str  # one sentence for the commit status and logs; names what unblocks it


def decide(facts: Facts, quotas: Quotas, approval_label: str) -> Decision:
    if not facts.author_can_write and not facts.approved:
        return Decision(False, f"waiting for a maintainer to apply the {approval_label} label")
    if quotas.per_author_per_day and facts.author_today >= quotas.per_author_per_day:
        return Decision(False, f"author quota reached ({quotas.per_author_per_day} evaluations "
                               "per day); a maintainer can /evalbot rerun later")
    if quotas.per_pr_per_day and facts.pr_today >= quotas.per_pr_per_day:
        return Decision(False, f"PR quota reached ({quotas.per_pr_per_day} evaluations per day); "
                               "a maintainer can /evalbot rerun later")
    return Decision(True, "admitted")


def rerun_allowed(can_write: bool, head_evaluated: bool) -> bool:
    """A rerun of an unchanged, already evaluated head spends box time: maintainers only."""
    return can_write or not head_evaluated
