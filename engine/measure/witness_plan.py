"""Which witnesses run, in what order, and with how much box time: pure, from the run's records.

The witnesses run after all the measuring. Only a witness with a cell to confirm runs; the one
whose cells claim the highest tier goes first. Every one runs (a cell whose gain the harness did
not time is not believed, issue 53), until one is contradicted: the PR's printed rates are then
refuted (REJECT) and the rest are skipped, recorded as `stopped: not_needed` (docs/trust.md §2);
none runs where a cell measured regressed already makes the verdict a REJECT (`regression_decides`).
A witness whose every cell left to time is timed by narrower witnesses of its run is skipped
the same way (`narrower_cover`). Those timing unchanged cells only run after the others, the least
work first, and once one of them settles a cell not believed (`slower`: the headline is then
eval:inconclusive at best) the rest of them are skipped too (`order`, `caps_headline`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..contract.job import Cell, StoppingRule
from ..contract.shared import witness_interval
from ..contract.witness_spec import WitnessSpec
from . import witness


class Record(Protocol):
    cell: Cell
    looks: list[dict[str, Any]]
    samples: list[dict[str, Any]]


Todo = tuple[Any, WitnessSpec, list[str]]  # (its run, the witness, the cells it is to time)


def to_confirm(spec: WitnessSpec, records: Mapping[str, Record], rule: StoppingRule) -> list[str]:
    """The covered cells to time: the improved ones, or (`witness_every_cell`) every one not
    regressed; every one in an A/A calibration of the witnesses."""
    if rule.witness_aa:
        return list(spec.cells)
    decisions = {k: r.looks[-1]["decision"] for k, r in records.items() if r.looks}
    if rule.witness_every_cell:  # timed both ways: all but a regression, which needs no witness
        return [k for k in spec.cells if k in decisions and decisions[k] != "regressed"]
    return witness.to_confirm(spec, decisions)


def regression_decides(records: Mapping[str, Record], rule: StoppingRule) -> bool:
    """Does a cell measured regressed settle the verdict (the policy REJECTs it, `rule.
    regression_rejects`)? No witness could then change it: none runs (a REJECT's box time)."""
    return rule.regression_rejects and not rule.witness_aa and any(
        r.looks and r.looks[-1]["decision"] == "regressed" for r in records.values())


def narrower_cover(spec: WitnessSpec, cells: Sequence[str],
                   witnesses: Sequence[WitnessSpec]) -> bool:
    """Are all of `cells` (those `spec` would time) timed by narrower witnesses of its run: each
    one's whole work some of those cells, and less than `spec`'s? Those run (their cells are to
    time), on their cells' work alone, so `spec` could add only the work of its other cells,
    which need no witness (a regression): the demo's decode-1024, which also times the prefill,
    beside prefill-1024 for a head whose decode@1024 regressed."""
    narrower = [w for w in witnesses if set(w.cells) <= set(cells) and set(w.cells) < set(spec.cells)]
    return set(cells) <= {key for w in narrower for key in w.cells}


def timed_by_narrower(key: str, spec: WitnessSpec, witnesses: Sequence[WitnessSpec]) -> bool:
    """Does a narrower witness of the run (fewer cells, `key` among them) time `key`? An
    unchanged cell's slowdown is then left to it to rule out (its noise is the cell's own work's,
    not the wider witness's other work's): Qwen3.6's decode@4096 has its own decode witness
    beside the prefill one whose 4096-id fill would drown a 2% slowdown of 512 steps."""
    return any(key in w.cells and set(w.cells) < set(spec.cells) for w in witnesses)


def order(todo: Sequence[Todo], records: Mapping[str, Record],
          rule: StoppingRule) -> list[Todo]:
    """The witnesses to run, in order. First those with an improved cell to time, the highest
    claim first: a contradiction REJECTs, whatever the others show. Then those timing unchanged
    cells only, the least work first (main's printed seconds for it): they can neither REJECT
    (only an improved cell is spoofed) nor earn a tier, so once one leaves a cell not believed,
    the wider ones after it could change no more than their own cells' rows."""
    gains = sorted([t for t in todo if claims_gain(t[2], records)], reverse=True,
                   key=lambda t: claimed_rank(t[2], records, rule))
    unchanged = sorted([t for t in todo if not claims_gain(t[2], records)],
                       key=lambda t: main_work_s(t[1], records))
    return gains + unchanged


def claims_gain(cells: Sequence[str], records: Mapping[str, Record]) -> bool:
    """Is any of the cells measured improved (or improving) at its last look?"""
    return any(records[k].looks and records[k].looks[-1]["decision"] in ("improved", "improving")
               for k in cells)


def main_work_s(spec: WitnessSpec, records: Mapping[str, Record]) -> float:
    """main's seconds for the witness's work, by its printed rates (0 for a cell without)."""
    seconds = 0.0
    for key, tokens in spec.cells.items():
        rec = records.get(key)
        claim = None if rec is None else witness_interval.claimed_saving(
            rec.samples, tokens, rec.cell.higher_is_better)
        seconds += claim[1] if claim else 0.0
    return seconds


def caps_headline(settled_by: str, cells: Sequence[str], records: Mapping[str, Record],
                  rule: StoppingRule) -> bool:
    """Did a witness timing unchanged cells only settle one of them not believed (`slower`: the
    upper bound of its saving below what would rule the slowdown out)? The headline is then
    eval:inconclusive at best (evalbot/grading/grade.py), and the witnesses left that time
    unchanged cells only are not needed: skipping them can only leave their cells not believed."""
    return (settled_by == "slower" and rule.witness_every_cell and not rule.witness_aa
            and not claims_gain(cells, records))


def claimed_rank(cells: Sequence[str], records: Mapping[str, Record],
                 rule: StoppingRule) -> tuple[int, float]:
    """The highest (tier, estimate) the cells' own measuring claims: the tier's index in the
    rule's edges (0: below the lowest), then the speedup."""
    best = (0, -math.inf)
    for key in cells:
        rec = records[key]
        est = float(rec.looks[-1]["estimate"]) if rec.looks else 0.0
        gain = math.log1p(est) if est > -1 else -math.inf
        edges = rule.tier_edges.get(rec.cell.key, [])
        best = max(best, (sum(gain >= e for e in edges), est))
    return best


def room(spec: WitnessSpec, rule: StoppingRule, budget_left_s: float, budget_s: float,
         measured_s: float, witnessed_s: float) -> witness.Room | None:
    """Its box time. Up to its first look: what is left of the PR's whole budget, the
    measuring's `budget_left_s` plus the witnesses' part of it (witness_share × `budget_s`, the
    budget as main's pace scaled it: StoppingRule.total_budget_s), so a measuring that spent its budget never
    starves the first look, on a slow box as on a fast one. Beyond it: what is left of
    the share of the measuring's box time; where the witnesses time every covered cell, of the
    measuring's budget: their pairs are then the measurement of every unchanged cell, and a
    steady engine's measuring, decided at 2 pairs, says nothing of what they need (on an H100
    sparkinfer's cut sweep measured 14 s, and its A/A's witnesses were cut at 3 pairs:
    docs/gpu-e2e.md, run 53). None (unbounded) in an A/A calibration, which measures every pair
    of every witness."""
    if rule.witness_aa:
        return None
    spent = max(measured_s, budget_s) if rule.witness_every_cell else measured_s
    return witness.Room(spec.looks[0],
                        max(budget_left_s + rule.witness_share * budget_s, 0.0),
                        max(rule.witness_share * spent - witnessed_s, 0.0))
