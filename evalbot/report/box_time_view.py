"""Box time in words, for a comment's details and the dashboard's recent verdicts ("box time
9 min 10 s, largest: correctness (reference) 5 min 20 s"), and `evalbot box-time RESULTS.json...`:
where each evaluation's box time went, stage by stage.

The command prints one row per file (evalbot/grading/box_time.py): the stages the harness
recorded, or for an older harness's results what can be derived from them (marked `*`; unknown:
`—`). A file that cannot be read is named on stderr with its problem, the others are still
printed, and the exit is 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from evalbot.config.errors import EvalbotError
from evalbot.grading.box_time import STAGES, BoxTime, of_document, recorded

WORDS = {"builds": "builds", "warmups": "warm-ups", "measuring": "measuring",
         "witnesses": "witnesses", "correctness_reference": "correctness (reference)",
         "correctness_base": "correctness (main)", "correctness_head": "correctness (PR)",
         "rest": "rest"}


def summary(verdict: Mapping[str, Any], results: Mapping[str, Any] | None = None) -> str:
    """`9 min 10 s, largest: correctness (reference) 5 min 20 s`: the evaluation's box time and
    its largest stage as the harness recorded them (the verdict's provenance, else the
    results); the total alone from an older harness; "" when nothing records it."""
    timing = (verdict.get("provenance") or {}).get("timing") or (results or {}).get("timing") or {}
    total = timing.get("total_s")
    if not isinstance(total, (int, float)):
        return ""
    figures = recorded(timing)
    largest = figures.largest() if figures else None
    if largest is None:
        return duration(total)
    return f"{duration(total)}, largest: {WORDS[largest[0]]} {duration(largest[1])}"


def duration(seconds: float) -> str:
    """As people say it: `4.2 s`, `42 s`, `9 min 10 s`, `2 h 05 min`."""
    if round(seconds, 1) < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


# ---- evalbot box-time --------------------------------------------------------------------------
UNKNOWN = "—"


@click.command("box-time")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object per file, as a list")
def box_time_cmd(files: tuple[Path, ...], as_json: bool) -> None:
    """Print each results file's box time per stage, its total and its largest stage."""
    rows, bad = [], 0
    for path in files:
        try:
            rows.append((path, read(path)))
        except EvalbotError as exc:
            click.echo(f"error: {path}: {exc}", err=True)
            bad += 1
    if as_json:
        click.echo(json.dumps([as_dict(path, figures) for path, figures in rows], indent=2))
    elif rows:
        _print_table(rows)
    if bad:
        sys.exit(1)


def read(path: Path) -> BoxTime:
    try:
        doc = json.loads(path.read_bytes())
    except OSError as exc:
        raise EvalbotError(f"cannot read it ({exc.strerror or exc})") from exc
    except ValueError as exc:  # not UTF-8 text, or not JSON
        raise EvalbotError(f"not JSON ({exc})") from exc
    return of_document(doc)


def as_dict(path: Path, figures: BoxTime) -> dict[str, Any]:
    largest = figures.largest()
    return {"file": str(path), "total_s": figures.total_s, "stages": figures.stages,
            "derived": sorted(figures.derived),
            "largest": {"stage": largest[0], "seconds": largest[1]} if largest else None}


def _print_table(rows: list[tuple[Path, BoxTime]]) -> None:
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    table = Table(title="box time per stage (seconds)")
    table.add_column("file", no_wrap=True)
    for stage in STAGES:
        table.add_column(WORDS[stage].replace(" (", "\n("), justify="right")
    table.add_column("total", justify="right")
    table.add_column("largest")
    for path, figures in rows:
        largest = figures.largest()
        table.add_row(Text(str(path)), *(_seconds(figures, s) for s in STAGES),  # no markup
                      _number(figures.total_s),
                      f"{WORDS[largest[0]]} {duration(largest[1])}" if largest else UNKNOWN)
    if any(figures.derived for _, figures in rows):
        table.caption = (f"*: derived from an older harness's results (no timing.stages); "
                         f"{UNKNOWN}: not recorded; there, rest holds the unknown stages")
    console = Console()
    # as wide as the table needs: a folded path or figure is harder to read than a long line
    natural = Measurement.get(console, console.options.update(max_width=1000), table).maximum
    Console(width=max(console.width, natural)).print(table)


def _seconds(figures: BoxTime, stage: str) -> str:
    return _number(figures.stages[stage]) + ("*" if stage in figures.derived else "")


def _number(seconds: float | None) -> str:
    return UNKNOWN if seconds is None else f"{seconds:.1f}"
