"""The grader's side of the rule: every cell's looks recomputed from its recorded samples, as the
harness took them (engine/measure/speed.py), so results whose looks differ are refused.

Rules before version 3 (no `fault_sigmas`) replay per cell on its kept pairs, the run's cells
testing their calibration together. From version 3 each run is replayed pair by pair through
engine/contract/shared/run_looks.py, the fault screen and the retaken looks included, and the drops it
records must be the screen's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import stats
from .run_looks import RunCell, RunLooks


def bounds_of(rule: Mapping[str, Any]) -> list[stats.Bounds]:
    """The schedule of a rule (a StoppingRule as a dict, or a results file's `rule`).

    A rule without the floor and equivalence lists is the first version, where one critical
    value served every test: each missing list is `critical` again. A rule without `pool_df`
    has no tier test and no guard (zeros). Lists of another length than `looks` are an error.
    """
    looks, critical = list(rule["looks"]), list(rule["critical"])
    pool_df = int(rule.get("pool_df") or 0)

    def per_look(key: str, default: list[float]) -> list[float]:
        return list(rule.get(key) or default)

    zeros = [0.0] * len(looks)
    return [stats.Bounds(int(n), float(c), float(cf), float(e), float(ef), float(q), float(qf),
                         float(g), pool_df)
            for n, c, cf, e, ef, q, qf, g in zip(
                looks, critical, per_look("critical_floor", critical),
                per_look("equivalence", critical), per_look("equivalence_floor", critical),
                per_look("settle", zeros), per_look("settle_floor", zeros),
                per_look("guard", zeros), strict=True)]


def cell_key(record: Mapping[str, Any]) -> str:
    return f"{record['model']}/{record['metric']}@{record['ctx']}"


def _ratios(record: Mapping[str, Any]) -> Any:
    kept = [s for s in record["samples"] if not s["dropped"]]
    base = [s["value"] for s in kept if s["side"] == "base"]
    head = [s["value"] for s in kept if s["side"] == "head"]
    n = min(len(base), len(head))
    return stats.log_ratios(base[:n], head[:n], record["higher_is_better"])


def cell_floor(record: Mapping[str, Any], rule: Mapping[str, Any]) -> float:
    """The cell's calibrated per-pair sd of its log-ratio: its own floor, else the rule's."""
    return float((rule.get("sd_floors") or {}).get(cell_key(record), rule["sd_floor"]))


def replay(record: Mapping[str, Any], rule: Mapping[str, Any],
           refuted: Sequence[bool] = ()) -> list[stats.Look]:
    """Recompute a cell's looks from its recorded samples; `refuted` per look comes from its
    run (replay_all), as the harness computed it."""
    edges = (rule.get("tier_edges") or {}).get(cell_key(record))
    return stats.sequential(_ratios(record), bounds_of(rule), cell_floor(record, rule),
                            rule["significance"], rule["tolerance"], edges, refuted)


def replay_all(records: Sequence[Mapping[str, Any]],
               rule: Mapping[str, Any]) -> list[list[stats.Look]]:
    """Every cell's looks, each run's cells testing the calibration together (what the grader
    does). Cells of one run are those of one model whose samples came from the same processes."""
    screened = float(rule.get("fault_sigmas") or 0) > 0
    runs: dict[tuple[Any, ...], list[int]] = {}
    for i, rec in enumerate(records):
        seqs = tuple(s.get("seq") for s in rec["samples"] if screened or not s["dropped"])
        runs.setdefault((rec["model"], seqs), []).append(i)
    schedule = bounds_of(rule)
    out: list[list[stats.Look]] = [[] for _ in records]
    for members in runs.values():
        if screened:
            looks = replay_run([records[i] for i in members], rule)
            for i in members:
                out[i] = looks.looks.get(cell_key(records[i]), [])
            continue
        refuted = stats.refuted_per_look([_ratios(records[i]) for i in members],
                                         [cell_floor(records[i], rule) for i in members], schedule)
        for i in members:
            out[i] = replay(records[i], rule, refuted)
    return out


def run_looks_of(cells: Sequence[RunCell], rule: Mapping[str, Any]) -> RunLooks:
    """An empty run of `cells` under `rule` (a StoppingRule as a dict, or a results' rule)."""
    return RunLooks(cells, bounds_of(rule), float(rule["significance"]),
                    float(rule["tolerance"]), float(rule.get("fault_sigmas") or 0))


def run_cell(record: Mapping[str, Any], rule: Mapping[str, Any]) -> RunCell:
    edges = (rule.get("tier_edges") or {}).get(cell_key(record))
    return RunCell(cell_key(record), bool(record["higher_is_better"]), cell_floor(record, rule),
                   tuple(float(e) for e in edges) if edges else None)


def replay_run(records: Sequence[Mapping[str, Any]], rule: Mapping[str, Any]) -> RunLooks:
    """One run's cells replayed pair by pair (rule version 3); its recorded drops must be the
    ones the GPU state and the screen give."""
    looks = run_looks_of([run_cell(r, rule) for r in records], rule)
    pairs: dict[Any, dict[str, dict[str, Any]]] = {}
    for rec in records:
        for s in rec["samples"]:
            pairs.setdefault(s["pair"], {}).setdefault(s["side"], {})[cell_key(rec)] = s
    for pair, sides in pairs.items():
        if set(sides) != {"base", "head"}:
            raise ValueError(f"pair {pair} lacks a side: {sorted(sides)}")
        throttled = any(s.get("throttled") for side in sides.values() for s in side.values())
        looks.add({cell_key(r): (sides["base"][cell_key(r)]["value"],
                                 sides["head"][cell_key(r)]["value"]) for r in records},
                  throttled)
    dropped = set(looks.dropped)
    for rec in records:
        recorded = {s["pair"] for s in rec["samples"] if s["dropped"]}
        if recorded != dropped:
            raise ValueError(f"{cell_key(rec)}: dropped pairs {sorted(recorded)}, the screen "
                             f"drops {sorted(dropped)}")
    return looks
