"""`evalbot dashboard --out DIR`: a static site (no JavaScript, no network).

index.html has three sections, from the store's verdict history: main's speed over time per
repo, model, metric and context with each merged PR's step marked (the frontier journey); the
recent verdicts with links to their PRs and the state of their signatures; each box's noise
floor over time, and its witness floors against its recent jobs' pairs (a stale one confirms
nothing until it is measured again). cells/ holds a page per cell and regressions.html every slower cell
(evalbot.report.dashboard_pages).
Every row of the history is read as it may be published (evalbot.report.publication.public_row):
no page and no copy shows more of a PR than its comment does. Every text from the history is
autoescaped (jinja2 autoescape=True); the charts are SVG written by matplotlib
(evalbot.report.charts), which escapes its own text.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import jinja2
from markupsafe import Markup

from evalbot.audit.signing import KEYS_DIR, SignatureError, load_public_keys, verify_verdict
from evalbot.config.resources import TEMPLATES_DIR
from evalbot.grading.grade import ctx_name
from evalbot.report import box_time_view
from evalbot.report.charts import Line, Marker, line_chart
from evalbot.report.dashboard_pages import CHARTABLE_S, cell_pages, one_level, pr_url, regressions, when
from evalbot.report.history import (
    NoisePoint,
    Series,
    calibration_points,
    cell_page,
    main_series,
    noise_points,
)
from evalbot.report.publication import public_row
from evalbot.report.run_page import RUNS, run_page, run_path, waiting_page
from evalbot.report.run_page import job_dir as _job_dir
from evalbot.report.witness_floors import dashboard_rows
from evalbot.store.jobs import Store
from evalbot.store.noise import NoiseStore

TEMPLATES = TEMPLATES_DIR
RECENT = 50
CORRECTNESS_WORDS = {"inert": "identical to main", "pass": "same as main", "reject": "changed",
                     "not-scored": "not scored"}
_pr_url, _when = pr_url, when


@dataclass(frozen=True)
class Chart:
    title: str
    svg: Markup | None  # None: nothing honest to draw (one commit of main, or a few minutes)
    steps: list[dict[str, Any]]
    page: str = ""
    summary: str = ""


def build_site(store: Store, out: Path, keys_dir: Path = KEYS_DIR,
               calibrations: list[NoisePoint] | None = None) -> Path:
    """Render the dashboard into out/ (index.html, regressions.html, cells/); returns index."""
    rows = [public_row(row) for row in store.history()]
    counter = iter(range(1, 1_000_000))  # chart ids: unique and deterministic within the page

    def next_id() -> str:
        return f"c{next(counter)}"

    series = main_series(rows, store.merges())
    frontier = _frontier(series, next_id)
    if calibrations is None:
        kept = NoiseStore(store.path)
        try:
            calibrations = calibration_points(kept.history())
        finally:
            kept.close()
    points = noise_points(rows, calibrations)
    env = _environment()
    page = env.get_template("dashboard.html.j2").render(
        page_title="dashboard", root="", frontier=frontier, noise=_noise(points, next_id),
        witness_floors=dashboard_rows(store.db),
        verdicts=_recent(rows, _keys(keys_dir)), total=len(rows),
        updated=_when(rows[0]["created"]) if rows else "never")
    pages = {"index.html": page, "regressions.html": regressions(env, rows),
             **cell_pages(env, rows, series, points, next_id)}
    for path, html in pages.items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(html, encoding="utf-8")
    _write_runs(env, rows[:RECENT], out)
    graded = {row["job_id"] for row in rows}
    for job in store.jobs():  # the pages the pending comments link (evalbot.github.pending)
        if job.state in ("queued", "running") and job.id not in graded:
            waiting = out / run_path(job.id)
            waiting.parent.mkdir(parents=True, exist_ok=True)
            waiting.write_text(waiting_page(env, job), encoding="utf-8")
    return out / "index.html"


def _write_runs(env: jinja2.Environment, rows: list[dict[str, Any]], out: Path) -> None:
    """Each listed verdict's page (run_page.py, what its comment links), verdict.json and
    results.json under runs/<job>/, as published (the rows are public_row's): a reader checks
    the page's figures against them."""
    for row in rows:
        run = out / RUNS / _job_dir(row["job_id"])
        run.mkdir(parents=True, exist_ok=True)
        for name, doc in (("verdict.json", row["verdict"]), ("results.json", row["results"])):
            (run / name).write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")
        (run / "index.html").write_text(run_page(env, row), encoding="utf-8")


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
        page = cell_page(repo, model, metric, ctx)
        if all(len(s.levels) < 2 and s.times[-1] - s.times[0] < CHARTABLE_S for s in boxes):
            summary = " ".join(one_level(s) for s in boxes)
            out[repo][model].append(Chart(title, None, [], page, summary))
            continue
        lines = [Line(s.box, [lv.first for lv in s.levels] + [s.times[-1]],
                      [lv.value for lv in s.levels] + [s.levels[-1].value], "steps", i)
                 for i, s in enumerate(boxes)]
        lines += [Line(f"{s.box}: each run", s.times, s.values, "points", i)
                  for i, s in enumerate(boxes)]
        markers = [Marker(st.time, st.value, _marker_text(st.pr, st.change), st.change >= 0)
                   for s in boxes for st in s.steps]
        svg = line_chart(next_id(), f"main: {title}", boxes[0].unit, lines, markers)
        steps = [_step_row(repo, s.box, st) for s in boxes for st in s.steps]
        out[repo][model].append(Chart(title, Markup(svg), steps, page))
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
        times = [p.time for ps in cells.values() for p in ps]
        if max(times) - min(times) < CHARTABLE_S:
            table = [{"cell": cell, "runs": len(ps),
                      "sd": f"{100 * sorted(p.sd for p in ps)[len(ps) // 2]:.2f}%"}
                     for cell, ps in sorted(cells.items())]
            charts.append(Chart(box, None, table))
            continue
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
            "run": run_path(row["job_id"]).removesuffix("index.html"),
            "base": row["base_sha"][:10], "headline": v.get("headline", "?"),
            "kind": v.get("kind", "?"),
            "best": (f"{best['model']} {best['metric']}@{ctx_name(best['ctx'])} "
                     f"{_pct(best['speedup'])} [{_pct(best['lo'])}, {_pct(best['hi'])}]"
                     if best else "-"),
            "correctness": CORRECTNESS_WORDS.get(
                str((v.get("correctness") or {}).get("decision", "-")),
                str((v.get("correctness") or {}).get("decision", "-"))),
            "signature": _signature(v, keys),
            "box_time": box_time_view.summary(v, row["results"]) or "-",
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


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


@click.command()
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="directory for the static site (index.html)")
@click.option("--store", "store_file", type=click.Path(path_type=Path),
              default=Path("evalbot.sqlite3"), show_default=True, help="the evalbot SQLite store")
@click.option("--keys", "keys_dir", type=click.Path(path_type=Path), default=KEYS_DIR,
              show_default=True, help="published public keys, to check verdict signatures")
def dashboard(out: Path, store_file: Path, keys_dir: Path) -> None:
    """Write the static dashboard: main's speed over time, recent verdicts, box noise."""
    from evalbot.config.errors import EvalbotError

    if not store_file.is_file():  # Store() would create an empty one: say what is missing
        raise EvalbotError(f"{store_file}: no such store (pass --store FILE)")
    store = Store(store_file)
    try:
        index = build_site(store, out, keys_dir)
    finally:
        store.close()
    click.echo(f"dashboard written to {index}")
