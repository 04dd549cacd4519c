"""`evalbot dashboard --out DIR`: a static site (one index.html, no JavaScript, no network).

Three sections, from the store's verdict history: main's speed over time per repo, model, metric
and context with each merged PR's step marked (the frontier journey); the recent verdicts with
links to their PRs and the state of their signatures; each box's noise floor over time.
Every text from the history is autoescaped (jinja2 autoescape=True); the charts are SVG written by
matplotlib (evalbot.charts), which escapes its own text.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click
import jinja2
from markupsafe import Markup

from evalbot.charts import Line, Marker, line_chart
from evalbot.grading import ctx_name
from evalbot.history import (
    NoisePoint,
    Series,
    calibration_points,
    main_series,
    merges,
    noise_points,
)
from evalbot.resources import TEMPLATES_DIR
from evalbot.signing import KEYS_DIR, SignatureError, load_public_keys, verify_verdict
from evalbot.store import Store

TEMPLATES = TEMPLATES_DIR
RECENT = 50
_GITHUB_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class Chart:
    title: str
    svg: Markup
    steps: list[dict[str, Any]]


def build_site(store: Store, out: Path, keys_dir: Path = KEYS_DIR,
               calibrations: list[NoisePoint] | None = None) -> Path:
    """Render the dashboard into out/index.html; returns its path."""
    rows = store.history()
    counter = iter(range(1, 1_000_000))  # chart ids: unique and deterministic within the page

    def next_id() -> str:
        return f"c{next(counter)}"

    frontier = _frontier(main_series(rows, merges(store.db)), next_id)
    if calibrations is None:
        calibrations = calibration_points(store.db)
    noise = _noise(noise_points(rows, calibrations), next_id)
    page = _environment().get_template("dashboard.html.j2").render(
        frontier=frontier, noise=noise, verdicts=_recent(rows, _keys(keys_dir)),
        total=len(rows), updated=_when(rows[0]["created"]) if rows else "never")
    out.mkdir(parents=True, exist_ok=True)
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True)


def _frontier(series: list[Series], next_id: Any) -> dict[str, dict[str, list[Chart]]]:
    """repo -> model -> charts (one per metric and context; a line per box)."""
    grouped: dict[tuple[str, str, str, int], list[Series]] = defaultdict(list)
    for s in series:
        grouped[(s.repo, s.model, s.metric, s.ctx)].append(s)
    out: dict[str, dict[str, list[Chart]]] = defaultdict(lambda: defaultdict(list))
    for (repo, model, metric, ctx), boxes in sorted(grouped.items()):
        title = f"{model} · {metric} @ {ctx_name(ctx)}"
        lines = [Line(s.box, [lv.first for lv in s.levels] + [s.times[-1]],
                      [lv.value for lv in s.levels] + [s.levels[-1].value], "steps", i)
                 for i, s in enumerate(boxes)]
        lines += [Line(f"{s.box}: each run", s.times, s.values, "points", i)
                  for i, s in enumerate(boxes)]
        markers = [Marker(st.time, st.value, _marker_text(st.pr, st.change), st.change >= 0)
                   for s in boxes for st in s.steps]
        svg = line_chart(next_id(), f"main: {title}", boxes[0].unit, lines, markers)
        steps = [_step_row(repo, s.box, st) for s in boxes for st in s.steps]
        out[repo][model].append(Chart(title, Markup(svg), steps))
    return {repo: dict(models) for repo, models in out.items()}


def _marker_text(pr: int | None, change: float) -> str:
    return f"{'#' + str(pr) if pr is not None else 'main'} {100 * change:+.1f}%"


def _step_row(repo: str, box: str, st: Any) -> dict[str, Any]:
    est = st.pr_estimate
    return {"box": box, "when": _when(st.time), "pr": st.pr, "url": _pr_url(repo, st.pr),
            "from": st.from_sha[:10], "to": st.to_sha[:10], "change": _pct(st.change),
            "measured": (f"{_pct(est[0])} [{_pct(est[1])}, {_pct(est[2])}]" if est else "-")}


def _noise(points: list[NoisePoint], next_id: Any) -> list[Chart]:
    """One chart per box; a line per cell (and per source, calibration or verdicts)."""
    per_box: dict[str, dict[str, list[NoisePoint]]] = defaultdict(lambda: defaultdict(list))
    for p in points:
        per_box[p.box][p.cell + ("" if p.source == "verdict" else " (A/A)")].append(p)
    charts = []
    for box, cells in sorted(per_box.items()):
        lines = [Line(cell, [p.time for p in ps], [100 * p.sd for p in ps])
                 for cell, ps in sorted(cells.items())]
        svg = line_chart(next_id(), f"noise on {box}: sd of ln(head/base) per pair",
                         "sd (%)", lines)
        charts.append(Chart(box, Markup(svg), []))
    return charts


def _recent(rows: list[dict[str, Any]], keys: dict[str, Any] | None) -> list[dict[str, Any]]:
    out = []
    for row in rows[:RECENT]:
        v = row["verdict"]
        best = next((c for c in v.get("cells", []) if c["key"] == v.get("best_cell")), None)
        out.append({
            "when": _when(row["created"]), "repo": row["repo"], "pr": row["pr"],
            "url": _pr_url(row["repo"], row["pr"]), "head": row["head_sha"][:10],
            "base": row["base_sha"][:10], "headline": v.get("headline", "?"),
            "kind": v.get("kind", "?"),
            "best": (f"{best['model']} {best['metric']}@{ctx_name(best['ctx'])} "
                     f"{_pct(best['speedup'])} [{_pct(best['lo'])}, {_pct(best['hi'])}]"
                     if best else "-"),
            "correctness": (v.get("correctness") or {}).get("decision", "-"),
            "signature": _signature(v, keys),
        })
    return out


def _signature(verdict: dict[str, Any], keys: dict[str, Any] | None) -> str:
    if "signature" not in verdict:
        return "unsigned"
    if keys is None:
        return "signed (no keys to check)"
    try:
        return f"verified ({verify_verdict(verdict, keys)})"
    except SignatureError as exc:
        return f"INVALID: {exc}"


def _keys(keys_dir: Path) -> dict[str, Any] | None:
    try:
        return load_public_keys(keys_dir)
    except SignatureError:
        return None


def _pr_url(repo: str, pr: int | None) -> str | None:
    """A link only for a GitHub owner/name and a PR number (a local path gets none)."""
    if pr is None or not _GITHUB_REPO.match(repo):
        return None
    return f"https://github.com/{repo}/pull/{int(pr)}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


@click.command()
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="directory for the static site (index.html)")
@click.option("--store", "store_file", type=click.Path(path_type=Path),
              default=Path("evalbot.sqlite3"), show_default=True, help="the evalbot SQLite store")
@click.option("--keys", "keys_dir", type=click.Path(path_type=Path), default=KEYS_DIR,
              show_default=True, help="published public keys, to check verdict signatures")
def dashboard(out: Path, store_file: Path, keys_dir: Path) -> None:
    """Write the static dashboard: main's speed over time, recent verdicts, box noise."""
    from evalbot.errors import EvalbotError

    if not store_file.is_file():  # Store() would create an empty one: say what is missing
        raise EvalbotError(f"{store_file}: no such store (pass --store FILE)")
    store = Store(store_file)
    try:
        index = build_site(store, out, keys_dir)
    finally:
        store.close()
    click.echo(f"dashboard written to {index}")
