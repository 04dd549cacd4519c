"""The dashboard's pages beyond the overview: one per cell, and the regressions.

A cell page (cells/<repo>/<model>-<metric>-<ctx>.html, the path the PR comment links to) shows
main's history on each box with its noise band, the PRs that moved it and every verdict on it.
The band is main's level times exp(±2 sd/√2): sd is the box's noise on this cell (the sd of the
per-pair log-ratio, so sd/√2 is one run's), the range a re-run of unchanged main falls in.
With main measured at one commit only, a page says so in a sentence instead of drawing a flat
line over a few seconds of time axis.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timezone
from statistics import median
from typing import Any

import jinja2
from markupsafe import Markup

from evalbot.grading.grade import ctx_name
from evalbot.report.charts import Band, Line, Marker, Spread, line_chart
from evalbot.report.comment import decision_word
from evalbot.report.decisions import shown_decision
from evalbot.report.history import NoisePoint, Series, cell_page
from evalbot.report.numbers import interval, pct, rate

CHARTABLE_S = 3600.0  # a time axis shorter than this says nothing: a sentence or a table instead
# evalbot.evaluation.demo's repository name (report may not import evaluation: its layer is
# below; tests/test_dashboard.py checks the two agree)
DEMO_REPO = "demo/engine"
_GITHUB_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def pr_url(repo: str, pr: int | None) -> str | None:
    """A link only for a GitHub owner/name and a PR number (a local path gets none, nor the
    demo's repository: it is not on GitHub, and a link there would look real)."""
    if pr is None or not _GITHUB_REPO.match(repo) or repo == DEMO_REPO:
        return None
    return f"https://github.com/{repo}/pull/{int(pr)}"


def when(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def one_level(s: Series) -> str:
    """The honest empty state of a series: main measured at one commit."""
    values = s.values
    spread = f" [{rate(min(values), s.unit)}, {rate(max(values), s.unit)}]" if len(values) > 1 \
        else ""
    runs = f"{len(values)} run{'s' if len(values) != 1 else ''}"
    return (f"On {s.box}, main was measured at one commit so far ({s.levels[0].sha[:10]}): "
            f"{runs}, median {rate(s.levels[0].value, s.unit)}{spread}. The line appears "
            "once main moves.")


def cell_pages(env: jinja2.Environment, rows: list[dict[str, Any]], series: list[Series],
               noise: list[NoisePoint], next_id: Callable[[], str]) -> dict[str, str]:
    """Relative path -> HTML for every cell main was measured on."""
    sds: dict[tuple[str, str], list[float]] = defaultdict(list)
    for p in noise:
        sds[(p.box, p.cell)].append(p.sd)
    grouped: dict[tuple[str, str, str, int], list[Series]] = defaultdict(list)
    for s in series:
        grouped[(s.repo, s.model, s.metric, s.ctx)].append(s)
    pages = {}
    for (repo, model, metric, ctx), boxes in sorted(grouped.items()):
        key = f"{model}/{metric}@{ctx}"
        title = f"{model} · {metric} @ {ctx_name(ctx)}"
        charts = [_box_chart(s, title, median(sds[(s.box, key)]) if sds[(s.box, key)] else None,
                             next_id) for s in boxes]
        steps = [_step(repo, s.box, st) for s in boxes for st in s.steps]
        path = cell_page(repo, model, metric, ctx)
        pages[path] = env.get_template("cell.html.j2").render(
            page_title=title, root="../../", repo=repo, title=title, charts=charts, steps=steps,
            verdicts=_cell_verdicts(rows, repo, key))
    return pages


def _box_chart(s: Series, title: str, sd: float | None,
               next_id: Callable[[], str]) -> dict[str, Any]:
    if len(s.levels) < 2 and (s.times[-1] - s.times[0]) < CHARTABLE_S:
        return {"box": s.box, "svg": None, "summary": one_level(s)}
    times = [lv.first for lv in s.levels] + [s.times[-1]]
    values = [lv.value for lv in s.levels] + [s.levels[-1].value]
    bands, spread = [], None
    if sd is not None:
        k = math.exp(2 * sd / math.sqrt(2))
        bands.append(Band("noise band (±2 sd of one run)", times, [v / k for v in values],
                          [v * k for v in values]))
        level = [next(lv.value for lv in reversed(s.levels) if lv.first <= t) if t >= s.levels[0].first
                 else s.levels[0].value for t in s.times]
        spread = Spread(f"noise band ±{100 * (k - 1):.2f}%", 100 * (k - 1), s.times,
                        [100 * (v / lv - 1) for v, lv in zip(s.values, level, strict=True)])
    lines = [Line("main's level", times, values, "steps", 0),
             Line("each run of main", s.times, s.values, "points", 0)]
    markers = [Marker(st.time, st.value, f"{'#' + str(st.pr) if st.pr else 'main'} "
                      f"{pct(st.change)}", st.change >= 0) for st in s.steps]
    svg = line_chart(next_id(), f"main on {s.box}: {title}", s.unit, lines, markers, bands, spread)
    return {"box": s.box, "svg": Markup(svg), "summary": ""}


def _step(repo: str, box: str, st: Any) -> dict[str, Any]:
    est = st.pr_estimate
    return {"box": box, "when": when(st.time), "pr": st.pr, "url": pr_url(repo, st.pr),
            "from": st.from_sha[:10], "to": st.to_sha[:10], "change": pct(st.change),
            "measured": f"{pct(est[0])} {interval(est[1], est[2])}" if est else "-"}


def _cell_verdicts(rows: list[dict[str, Any]], repo: str, key: str) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        if row["repo"] != repo:
            continue
        for c in row["verdict"].get("cells", []):
            if c["key"] == key and c.get("pairs", 0) > 0:
                out.append(_verdict_row(row, c))
    return out


def _verdict_row(row: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
    return {"when": when(row["created"]), "pr": row["pr"], "url": pr_url(row["repo"], row["pr"]),
            "head": row["head_sha"][:10], "base": row["base_sha"][:10],
            "decision": decision_word(shown_decision(c)), "slower": c["decision"] == "regressed",
            "change": f"{pct(c.get('speedup'))} {interval(c.get('lo'), c.get('hi'))}"
                      f"{'ᵉ' if c.get('interval') == 'equivalence' else ''}",
            "pairs": c.get("pairs", 0), "headline": row["verdict"].get("headline", "?"),
            "cell": f"{c['model']} {c['metric']} @ {ctx_name(c['ctx'])}",
            "page": cell_page(row["repo"], c["model"], c["metric"], c["ctx"])}


def regressions(env: jinja2.Environment, rows: list[dict[str, Any]]) -> str:
    """Every cell a verdict found slower, newest first."""
    found = [{**_verdict_row(row, c), "repo": row["repo"]} for row in rows
             for c in row["verdict"].get("cells", []) if c["decision"] == "regressed"]
    return env.get_template("regressions.html.j2").render(
        page_title="Regressions", root="", regressions=found, total=len(rows))
