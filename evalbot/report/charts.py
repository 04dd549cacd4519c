"""Charts for the dashboard: matplotlib rendered to SVG text, inlined into the page.

Why matplotlib to inline SVG: the page then needs no JavaScript and no network (nothing to load,
nothing to execute), the output is deterministic for the same history (fixed hash salt, no date
in the metadata), it prints and zooms crisply, and text stays text (svg.fonttype "none"), so the
numbers in a chart can be searched and tested. The object API (Figure, no pyplot) keeps no global
state between charts.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from evalbot.config.errors import EvalbotError

try:
    import matplotlib
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter, date2num
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter
except ModuleNotFoundError as exc:  # an install without the `dashboard` extra (pyproject.toml)
    raise EvalbotError("the dashboard draws its charts with matplotlib, which is not installed: "
                       "pip install 'evalbot[dashboard]'") from exc

_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
            "#e377c2", "#7f7f7f", "#bcbd22")


@dataclass(frozen=True)
class Line:
    label: str
    times: Sequence[float]  # epoch seconds
    values: Sequence[float]
    kind: str = "line"  # "line", "steps" (a level per main SHA) or "points" (single runs)
    color: int | None = None  # palette index, so a box's levels and its runs share a colour


@dataclass(frozen=True)
class Band:
    """A shaded range per level (main's noise band): from each time to the next, lo..hi."""
    label: str
    times: Sequence[float]
    lo: Sequence[float]
    hi: Sequence[float]
    color: int = 0


@dataclass(frozen=True)
class Spread:
    """A panel under the chart, in % of main's level: the noise band as ±half_width around 0 and
    each run's deviation from the level in force. On the level's own axis a band of ±0.4% is
    thinner than the level line once main has moved 10%; here it fills a third of the panel."""
    label: str
    half_width: float  # % of the level
    times: Sequence[float]
    deviations: Sequence[float]  # % of the level
    color: int = 0


@dataclass(frozen=True)
class Marker:
    time: float
    value: float
    text: str  # e.g. "#12 +8.1%"
    up: bool  # the change improved the metric


def line_chart(chart_id: str, title: str, ylabel: str, lines: Sequence[Line],
               markers: Sequence[Marker] = (), bands: Sequence[Band] = (),
               spread: Spread | None = None) -> str:
    """One chart as an <svg> element (no XML prolog), ids made unique by chart_id."""
    fig = Figure(figsize=(6.4, 4.4 if spread else 3.0), dpi=100, layout="constrained")
    if spread:
        ax, below = fig.subplots(2, 1, sharex=True, height_ratios=[2.2, 1])
        _spread(below, spread)
    else:
        ax = fig.add_subplot()
    for band in bands:
        ax.fill_between([_when(t) for t in band.times], band.lo, band.hi, step="post",
                        color=_PALETTE[band.color % len(_PALETTE)], alpha=0.15, linewidth=0,
                        label=band.label)
    for i, line in enumerate(lines):
        color = _PALETTE[(i if line.color is None else line.color) % len(_PALETTE)]
        xs = [_when(t) for t in line.times]
        if line.kind == "steps":
            ax.step(xs, line.values, where="post", color=color, linewidth=2, label=line.label)
        elif line.kind == "points":
            ax.plot(xs, line.values, color=color, marker="o", markersize=3, linestyle="none",
                    alpha=0.45, label=line.label)
        else:
            ax.plot(xs, line.values, color=color, marker="o", markersize=3, linewidth=1.2,
                    label=line.label)
    for m in markers:
        color = "#2ca02c" if m.up else "#d62728"
        ax.axvline(_when(m.time), color=color, linestyle="--", linewidth=0.8)
        ax.annotate(m.text, (_when(m.time), m.value), xytext=(3, 6), textcoords="offset points",
                    fontsize=8, color=color)
    _style(ax, title, ylabel)
    values = [abs(v) for line in lines for v in line.values]
    if values and max(values) >= 1e4:
        ax.yaxis.set_major_formatter(EngFormatter(sep=" "))  # 1.15 M, not an offset "1e6"
    times = [t for line in lines for t in line.times]
    if times and max(times) - min(times) < 60:  # one moment: show an hour, not decades around it
        ax.set_xlim(_when(min(times) - 1800), _when(max(times) + 1800))
    if len(lines) + len(bands) > 1:
        ax.legend(fontsize=7, loc="best", frameon=False)
    return _svg(fig, chart_id)


def _spread(ax: matplotlib.axes.Axes, spread: Spread) -> None:
    color = _PALETTE[spread.color % len(_PALETTE)]
    w = spread.half_width
    ax.axhspan(-w, w, color=color, alpha=0.15, linewidth=0, label=spread.label)
    ax.axhline(0, color=color, linewidth=1)
    ax.plot([_when(t) for t in spread.times], spread.deviations, color=color, marker="o",
            markersize=3, linestyle="none", alpha=0.45)
    far = max([abs(d) for d in spread.deviations] + [w])
    ax.set_ylim(-1.25 * max(far, 1.5 * w), 1.25 * max(far, 1.5 * w))  # the band: >= 1/3 of it
    ax.set_ylabel("vs level (%)", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", frameon=False)


def _style(ax: matplotlib.axes.Axes, title: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=10, loc="left")
    ax.set_ylabel(ylabel, fontsize=9)
    locator = AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    ax.tick_params(labelsize=8)
    ax.grid(True, alpha=0.3)
    ax.margins(x=0.12, y=0.15)


def _when(t: float) -> float:
    """Epoch seconds as matplotlib's date number (days), for the date axis."""
    return float(date2num(datetime.fromtimestamp(t, tz=timezone.utc)))


def _svg(fig: Figure, chart_id: str) -> str:
    buf = io.StringIO()
    salt = re.sub(r"[^A-Za-z0-9_-]", "_", chart_id)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt,
                                "font.family": "DejaVu Sans"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: not valid inside HTML
    # Many charts share one HTML document, where ids must be unique: prefix every id and every
    # reference to one (matplotlib numbers its groups figure_1, axes_1, ... in each chart).
    text = re.sub(r'(\sid="|url\(#|href="#)', lambda m: f"{m.group(1)}{salt}-", text)
    return text.replace("<svg ", f'<svg class="chart" data-chart="{salt}" ', 1)
