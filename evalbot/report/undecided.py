"""Why a cell stayed undecided, in words that are true of its own interval (pure).

A cell is faster when its interval lies above 0 and its change passes +significance, slower when
below 0 and past -tolerance, unchanged when its equivalence interval lies inside the band
(engine/contract/shared/stats.py `decide`); undecided otherwise, once the budget is spent. Which of those
it missed is read off its published interval, so the comment never says a row "moved less than
this box can resolve" when it moved +52% with an interval 150 points wide (issue 48).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalbot.report.decisions import UNDECIDED_MARK as MARK
from evalbot.report.numbers import interval, pct
from evalbot.report.unconfirmed import cell_name

WIDE = "the noise is wide"
MORE = "comment `/evalbot measure-more` (more pairs, pooled with these) or `/evalbot rerun`"


def undecided_cells(verdict: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [c for c in verdict.get("cells") or []
            if c["decision"] == "inconclusive" and c["pairs"] > 0]


def why(cell: Mapping[str, Any], rule: Mapping[str, Any]) -> str:
    """Why this cell is undecided, from its interval and the rule's band."""
    lo, hi, change = cell.get("lo"), cell.get("hi"), cell.get("speedup")
    if lo is None or hi is None or change is None:
        return "its figures are not published"
    up, down = float(rule.get("significance") or 0), float(rule.get("tolerance") or 0)
    span = f"after {cell['pairs']} pair{'' if cell['pairs'] == 1 else 's'} its interval " \
           f"{interval(lo, hi)}"
    if lo <= 0 <= hi:
        if hi - lo > up + down:  # wider than the whole band an unchanged cell must fit in
            return (f"{WIDE} ({span} holds both no change and a change past "
                    f"{_band(up, down)})")
        return f"{span} holds no change, but reaches past the {_band(up, down)} band"
    if (lo > 0 and change >= up) or (hi < 0 and change <= -down):
        return f"{span} is past the band, but too few pairs were measured for a verdict"
    if lo > 0:
        return (f"faster than main ({span} lies above 0), but its change {pct(change)} is "
                f"below the +{_p(up)} a faster cell needs")
    return (f"slower than main ({span} lies below 0), but its change {pct(change)} does not "
            f"reach the −{_p(down)} a slower cell needs")


def lines(verdict: Mapping[str, Any]) -> list[str]:
    """`⚖️ prefill @ 0: undecided: the noise is wide: …`, one line per cell; several cells
    with the same kind of reason share a line that points at the table for their intervals."""
    cells = undecided_cells(verdict)
    rule = (verdict.get("provenance") or {}).get("rule") or {}
    many = len({c["model"] for c in verdict.get("cells") or []}) > 1
    if len(cells) <= 2:
        return [f"{MARK} {cell_name(c, many)}: undecided: {why(c, rule)}" for c in cells]
    wide = [c for c in cells if why(c, rule).startswith(WIDE)]
    rest = [c for c in cells if c not in wide]
    out = []
    if wide:
        out.append(f"{MARK} {', '.join(cell_name(c, many) for c in wide)}: undecided: {WIDE} "
                   "(their intervals, in the table, hold both no change and a change past the "
                   f"{_band(rule.get('significance') or 0, rule.get('tolerance') or 0)} band)")
    if rest:
        out.append(f"{MARK} {', '.join(cell_name(c, many) for c in rest)}: undecided: their "
                   "intervals, in the table, reach past the band on one side only")
    return out


def maintainer_step() -> str:
    return f"{MORE} to measure the {MARK} rows again"


def _band(up: float, down: float) -> str:
    return f"±{_p(up)}" if abs(up - down) < 1e-12 else f"[−{_p(down)}, +{_p(up)}]"


def _p(x: float) -> str:
    return f"{100 * float(x):g}%"
