"""A page per run on the dashboard (runs/<job>/index.html), the page the PR comment links.

It shows the run as its comment does (the comment rendered to HTML from the published verdict
and results: nothing more of the PR than the comment publishes), then its cells, its witnesses,
its correctness and its box time per stage, and links to its published verdict.json and
results.json beside it. The comment's markdown is rendered with raw HTML off: only the
template's own folding lines (`<details>`, `<summary>`, `<sub>`) are turned into HTML here, so a
model name or any text from the history stays text (tests/test_run_page.py plants one).
"""

from __future__ import annotations

import re
from typing import Any

import jinja2
from markdown_it import MarkdownIt  # rich's own dependency: no new package
from markupsafe import Markup

from evalbot.grading.box_time import box_time
from evalbot.report import comment_correctness
from evalbot.report.box_time_view import WORDS, duration
from evalbot.report.comment import CommentContext
from evalbot.report.comment import job_dir as job_dir
from evalbot.report.dashboard_pages import pr_url, when
from evalbot.report.decisions import decision_word, shown_decision
from evalbot.report.history import cell_page
from evalbot.report.numbers import interval, pct, rate
from evalbot.report.render import render_comment

RUNS = "runs"
_SUMMARY = re.compile(r"^<details><summary>(.*)</summary>$")
_SUB = re.compile(r"^<sub>(.*)</sub>$")


def run_path(job_id: str) -> str:
    """The run page, relative to the dashboard's root: what the comment links."""
    return f"{RUNS}/{job_dir(job_id)}/index.html"


def comment_html(markdown: str) -> Markup:
    """The comment as GitHub shows it (CommonMark and tables), its folds as open sections."""
    lines = []
    for line in markdown.splitlines()[1:]:  # the first is the hidden marker
        summary, sub = _SUMMARY.match(line), _SUB.match(line)
        if summary:
            lines.append(f"#### {summary.group(1)}")
        elif sub:
            lines.append(f"*{sub.group(1)}*")
        elif line.strip() not in ("</details>", "<details>"):
            lines.append(line)
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    return Markup(md.render("\n".join(lines)))


def run_page(env: jinja2.Environment, row: dict[str, Any]) -> str:
    """The page of one published history row (publication.public_row's)."""
    verdict, results = row["verdict"], row["results"] or None
    # links relative to runs/<job>/: the cell pages and the overview two folders up
    ctx = CommentContext(repo=row["repo"], dashboard_url="../..")
    text = render_comment(verdict, results=results, context=ctx)
    return env.get_template("run.html.j2").render(
        page_title=f"run {row['job_id']}", root="../../", row=row, verdict=verdict,
        when=when(row["created"]), url=pr_url(row["repo"], row["pr"]),
        comment=comment_html(text), cells=_cells(row), witnesses=_witnesses(verdict),
        correctness=_correctness(verdict), stages=_stages(results))


def _cells(row: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for c in row["verdict"].get("cells") or []:
        base = c.get("base_gmean") if c.get("base_gmean") is not None else c.get("base_median")
        head = c.get("head_gmean") if c.get("head_gmean") is not None else c.get("head_median")
        believed = c.get("believed") is not False
        out.append({
            "cell": f"{c['model']} {c['metric']} @ {c['ctx']}", "decision": decision_word(
                shown_decision(c)), "base": rate(base, c["unit"]) if base is not None else "-",
            "head": rate(head, c["unit"]) if believed and head is not None else "not believed",
            "change": f"{pct(c.get('speedup'))} {interval(c.get('lo'), c.get('hi'))}"
            if believed else "not believed",
            "pairs": c["pairs"], "dropped": c.get("dropped_pairs", 0),
            "page": "../../" + cell_page(row["repo"], c["model"], c["metric"], c["ctx"])
            if c["pairs"] > 0 else "",
        })
    return out


def _witnesses(verdict: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": w.get("name", "?"), "source": w.get("source", "witness"),
             "pairs": w.get("pairs", 0), "stopped": w.get("stopped") or "-",
             "cells": ", ".join(f"{k}: {v.get('status', '?')}" for k, v in
                                sorted((w.get("cells") or {}).items())) or "-"}
            for w in verdict.get("witnesses") or []]


def _correctness(verdict: dict[str, Any]) -> list[str]:
    out = [comment_correctness.line(verdict["correctness"])] if verdict.get("correctness") \
        else []
    out += [f"{g.get('model') or 'guard model'}: {g['decision']}"
            for g in verdict.get("correctness_guards") or []]
    return out


def _stages(results: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(stage, duration) per stage the results record, then the total."""
    if not results:
        return []
    figures = box_time(results)
    out = [(WORDS.get(name, name), duration(s)) for name, s in figures.stages.items()
           if s is not None]
    if figures.total_s is not None:
        out.append(("total", duration(figures.total_s)))
    return out


def waiting_page(env: jinja2.Environment, job: Any) -> str:
    """The page of a job not graded yet (queued or running), which its pending comment links:
    where it is; the verdict replaces it when the dashboard is next written."""
    return env.get_template("run_waiting.html.j2").render(
        page_title=f"run {job.id}", root="../../", job=job, url=pr_url(job.repo, job.pr),
        since=when(job.started) if job.started else "")
