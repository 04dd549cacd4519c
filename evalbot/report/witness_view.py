"""Each confirming witness as the comment needs it: what it covered, how far it got (pure).

A witness (docs/trust.md) is evalbot's own timed run of some cells' work. The verdict keeps the
grading's judgement of each (`verdict["witnesses"]`: usable pairs, `stopped`, per-cell status),
but a witness judged on fewer than MIN_PAIRS pairs keeps no cells there, and no looks at all. The
results' record (`results["witnesses"]`) has both; the comment uses it when it is given and says
no more than the verdict allows when it is not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalbot.grading.confirmation import FLOOR_STALE, MIN_PAIRS


@dataclass(frozen=True)
class WitnessView:
    name: str
    covers: frozenset[str] | None  # cell keys; None: not known (not judged, no results given)
    looks: tuple[int, ...]  # pairs at each look; (): not known without the results
    pairs: int  # usable verified pairs, as the grading counted them
    stopped: str  # "settled", "box_time", "not_needed", FLOOR_STALE or "" (every pair it could)
    ran: bool  # at least one process was timed
    head_failed: bool  # a PR process failed or its output did not agree with main's
    saving_s: float | None  # the mean saving per pair it measured (judged witnesses only)
    claimed_s: float  # what the printed rates claim it should save (positive claims)

    @property
    def first_look(self) -> int:
        """The pairs it needed before anything could be judged."""
        return max(self.looks[0], MIN_PAIRS) if self.looks else MIN_PAIRS


def witness_views(verdict: Mapping[str, Any],
                  results: Mapping[str, Any] | None = None) -> list[WitnessView]:
    """The confirming witnesses (not the samples' own records, which can never confirm)."""
    records = {w["name"]: w for w in (results or {}).get("witnesses") or []}
    return [_view(j, records.get(j["name"])) for j in verdict.get("witnesses") or []
            if j.get("source", "witness") == "witness"]


def _view(judged: Mapping[str, Any], record: Mapping[str, Any] | None) -> WitnessView:
    statuses = {c["status"] for c in (judged.get("cells") or {}).values()}
    return WitnessView(
        name=judged["name"], covers=_covers(judged, record),
        looks=tuple((record or judged).get("looks") or ()), pairs=int(judged.get("pairs") or 0),
        stopped=judged.get("stopped") or "",
        ran=_ran(record) if record else int(judged.get("pairs") or 0) > 0,
        head_failed="unverified" in statuses or _head_failed(record),
        saving_s=judged.get("saving_s"),
        claimed_s=sum(max(c.get("claimed_s") or 0.0, 0.0)
                      for c in (judged.get("cells") or {}).values()))


def _covers(judged: Mapping[str, Any], record: Mapping[str, Any] | None) -> frozenset[str] | None:
    if record is not None:
        return frozenset(record.get("cells") or {})
    if "lo_s" in judged or judged.get("stopped") == FLOOR_STALE:  # every covered cell with a
        return frozenset(judged.get("cells") or {})  # claim is listed
    return None


def _ran(record: Mapping[str, Any]) -> bool:
    """Whether any process was timed: a published record says so (it keeps main's samples
    only, report/public_results.py), a raw one shows it."""
    return bool(record["ran"]) if "ran" in record else bool(record["samples"])


def _head_failed(record: Mapping[str, Any] | None) -> bool:
    if record is not None and "head_failed" in record:  # a published record
        return bool(record["head_failed"])
    return any(s["side"] == "head" and not s["dropped"] and not s.get("verified")
               for s in (record or {}).get("samples") or [])
