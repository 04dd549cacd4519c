"""Each box's witness floors against its recent jobs' pairs (evalbot.grading.witness_floor), read
from the store: what the worker leaves unrun, and what `evalbot doctor`, /metrics and the
dashboard say. No box time: only what the jobs already measured."""

from __future__ import annotations

from pathlib import Path

from evalbot.grading.witness_floor import FloorCheck, WitnessRun, check, stale_names
from evalbot.store.schema import Connection, read_only
from evalbot.store.witness_runs import boxes, stored_floors, witness_records


def box_checks(db: Connection, box: str, profile: str) -> list[FloorCheck]:
    """Every witness of the profile that a recent job on the box judged with a floor."""
    runs = [WitnessRun(str(r["name"]), float(r.get("sd_floor_s") or 0.0),
                       int(r.get("floor_df") or 0), r.get("samples") or [], float(r["created"]))
            for r in witness_records(db, box, profile)]
    return check(runs, stored_floors(db, box, profile))


def stale_witnesses(store_path: Path, box: str, profile: str) -> frozenset[str]:
    """The witnesses whose floor on the box its recent pairs refute (none without a store)."""
    if not Path(store_path).is_file():
        return frozenset()
    with read_only(store_path) as db:
        return stale_names(box_checks(db, box, profile))


def all_checks(db: Connection) -> list[tuple[str, FloorCheck]]:
    """(box, check) for every box with a finished job, by box and witness."""
    return [(box, c) for box, profile in boxes(db) for c in box_checks(db, box, profile)]


def dashboard_rows(db: Connection) -> list[dict[str, str]]:
    """One row per box and witness for the dashboard's noise section."""
    return [{"box": box, "witness": c.witness, "floor": f"{c.floor_s:.4f} s ({c.floor_df} df)",
             "measured": "-" if c.measured_s is None else f"{c.measured_s:.4f} s",
             "pairs": f"{c.df} of {c.jobs} jobs",
             "state": "stale: run `evalbot calibrate`" if c.stale else "holds"}
            for box, c in all_checks(db)]

