"""What the PR comment says, as data for templates/comment.md.j2 (pure: verdict in, text out).

The first lines answer a contributor's four questions: did it get faster, where, how sure, what
next. Then the cells, slower ones first; everything else is folded. Unknown decisions and verdict
kinds (added by later policies) read as their own words rather than failing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalbot.grading.grade import ctx_name
from evalbot.grading.unexplained_cost import witness_margin
from evalbot.report import unconfirmed, undecided
from evalbot.report.comment_headline import (
    NOT_MEASURED,
    changed_models,
    confidence,
    headline,
    infra_reason,
    label,
    tally,
)
from evalbot.report.decisions import (
    DECISIONS,
    UNKNOWN_ORDER,
    WALL_CLOCK_MARK,
    decision_word,
    shown_decision,
    wall_clock_only,
)
from evalbot.report.history import box_label, cell_page, recent_main
from evalbot.report.numbers import interval, pct, rate, sparkline

NOT_BELIEVED = "not believed"  # a figure the harness's clock did not back (report/publication.py)
# Verdicts where an unconfirmed cell is why a tier is missing (or lower): their first lines say
# why. A rejected PR's answer is its rejection; its ❓ rows stay in the table.
TIER_KINDS = ("improved", "neutral", "inconclusive", "unconfirmed")

NEXT_STEPS = {
    "improved": "nothing to do: it is faster and computes the same model.",
    "neutral": "nothing to do: no speed change to claim.",
    "regressed": "fix the 🔻 rows and push; evalbot measures every new head.",
    "unconfirmed": ("the speed the engine printed was not matched by the harness's own clock; "
                    "make sure the speed-up runs in the timed path, then push."),
    "spoofed": "the engine's reported speed disagrees with the harness's own clock; fix it and push.",
}


@dataclass(frozen=True)
class CommentContext:
    """What a verdict alone does not know: where things are published, main's past."""

    repo: str = ""  # the engine repository as the store names it (owner/name or a path)
    clone: str = ""  # how to fetch it for the reproduce line; default: from repo
    dashboard_url: str = ""  # the published dashboard (cells/<page>.html under it)
    run_url: str = ""  # this run's published artifacts (verdict.json under it)
    main_history: Mapping[str, Sequence[float]] = field(default_factory=dict)  # key -> levels


def context_for(rows: list[dict[str, Any]], verdict: dict[str, Any], repo: str,
                reports_url: str = "") -> CommentContext:
    """The links under the config's `service.reports_url` (dashboard/ and runs/<job id>/) and
    main's recent levels on the verdict's box, from the store's history rows."""
    base = reports_url.rstrip("/")
    job = verdict["provenance"].get("job_id") or ""
    return CommentContext(repo=repo, dashboard_url=f"{base}/dashboard" if base else "",
                          run_url=f"{base}/runs/{job}" if base and job else "",
                          main_history=recent_main(rows, repo,
                                                   box_label(verdict["provenance"])))


def rows(verdict: dict[str, Any], ctx: CommentContext) -> list[dict[str, Any]]:
    """One row per measured cell, slower first, then faster, undecided, unchanged."""
    many = len({c["model"] for c in verdict["cells"]}) > 1
    out = []
    for c in verdict["cells"]:
        if c["pairs"] <= 0:  # counted as "not measured" in the tally line, no row of n/a
            continue
        shown = shown_decision(c)
        word, mark, order = DECISIONS.get(shown, (decision_word(shown), "⚠️", UNKNOWN_ORDER))
        equivalence = c.get("interval") == "equivalence"
        change = f"{pct(c['speedup'])} {interval(c['lo'], c['hi'])}{'ᵉ' if equivalence else ''}"
        if c.get("believed") is False:  # no figure of the PR's the bot does not believe
            change = NOT_BELIEVED
        where = f"{c['metric']} @ {ctx_name(c['ctx'])}"
        if wall_clock_only(c, verdict):
            word += f" {WALL_CLOCK_MARK}"
        out.append({
            "order": order, "mark": mark, "decision": word,
            "cell": f"{c['model']} {where}" if many else where,
            # main, PR and change from the same pairs and one estimator: the geometric means of
            # the pairs that decided, whose ratio is the change (medians of all pairs are not)
            "base": rate(_level(c, "base"), c["unit"]),
            "head": NOT_BELIEVED if c.get("believed") is False else rate(_level(c, "head"),
                                                                          c["unit"]),
            "change": f"**{change}**" if order == 0 else change, "pairs": c["pairs"],
            "history": sparkline(list(ctx.main_history.get(c["key"], []))),
            "page": _page(ctx, verdict, c),
        })
    return sorted(out, key=lambda r: r["order"])


def _level(cell: dict[str, Any], side: str) -> Any:
    """A side's level in the row; a verdict from before the geometric means has its median."""
    gmean = cell.get(f"{side}_gmean")
    return gmean if gmean is not None else cell.get(f"{side}_median")


def _page(ctx: CommentContext, verdict: dict[str, Any], cell: dict[str, Any]) -> str:
    if not ctx.dashboard_url:
        return ""
    return f"{ctx.dashboard_url}/{cell_page(ctx.repo, cell['model'], cell['metric'], cell['ctx'])}"


def counts(verdict: dict[str, Any]) -> str:
    """`**2 slower** · 0 faster · 1 unchanged · 1 undecided`: what happened, slower first."""
    tally_ = tally(verdict)
    parts = []
    for decision in ("regressed", "improved", "neutral", "inconclusive"):
        parts.append((decision, tally_.pop(decision, 0)))
    parts += sorted(tally_.items())
    return " · ".join(f"**{n} {decision_word(d)}**" if n and DECISIONS.get(d, ("", "", 0))[2] == 0
                      else f"{n} {decision_word(d)}" for d, n in parts)


def _named(cell: dict[str, Any], cells: list[dict[str, Any]]) -> str:
    return unconfirmed.cell_name(cell, len({c["model"] for c in cells}) > 1)


def witness_lines(verdict: dict[str, Any]) -> list[str]:
    """One line per witness the harness timed: its pairs, what it showed, why it stopped short."""
    out = []
    rule = (verdict.get("provenance") or {}).get("rule") or {}
    # under the one rule (issue 53) a witness's word for a cell is whether it ruled out the
    # slowdown, which "unconfirmed" (no saving to confirm) would hide
    margin = witness_margin(rule)
    for w in verdict.get("witnesses") or []:
        if w.get("source", "witness") != "witness":
            continue
        # not run: another witness settled the verdict, or narrower witnesses time its cells
        if w.get("stopped") == "not_needed":
            out.append(f"Witness `{w['name']}`: not run, the verdict did not need it")
            continue
        shown = sorted({_outcome(c, margin) for c in (w.get("cells") or {}).values()}) \
            or ["not judged"]
        cut = "; stopped at its share of the box time" if w.get("stopped") == "box_time" else ""
        n = w["pairs"]
        out.append(f"Witness `{w['name']}` (the harness's own clock): {n} usable "
                   f"pair{'' if n == 1 else 's'}, {', '.join(shown)}{cut}")
    return out


def _outcome(cell: dict[str, Any], margin: float) -> str:
    """A covered cell's word in its witness's line: confirmed, or, under the one rule, whether
    a slowdown of the witness margin was ruled out; else the status as judged."""
    if cell["status"] == "confirmed" or margin <= 0 or "ruled_out" not in cell:
        return str(cell["status"])
    return f"a {100 * margin:g}% slowdown {'' if cell['ruled_out'] else 'not '}ruled out"


# A verdict that names no unconfirmed cell (an older one) but a witness cut for box time.
CUT_BY_BOX_TIME = ("evalbot's own timed run ran out of box time before it could confirm the "
                   "speed-up. Maintainer: raise `speed.witness_share` or `speed.budget_s` in the "
                   "profile, or comment `/evalbot rerun`. Contributor: "
                   f"{unconfirmed.NOTHING_TO_CHANGE}.")
UNMEASURED = ("raise `speed.budget_s` in the profile, or comment `/evalbot rerun`, to measure "
              "the cells the budget did not reach")
SCORE_AGAIN = "comment `/evalbot rerun` to score correctness again"


def why_lines(verdict: dict[str, Any], results: dict[str, Any] | None = None) -> list[str]:
    """Why each faster cell got no tier (unconfirmed.py), where that is the verdict's story,
    and, where the verdict is undecided, why each undecided cell is (undecided.py)."""
    if verdict["kind"] not in TIER_KINDS:
        return []
    out = unconfirmed.lines(unconfirmed.groups(verdict, results))
    return out + undecided.lines(verdict) if verdict["kind"] == "inconclusive" else out


def next_step(verdict: dict[str, Any], results: dict[str, Any] | None = None) -> str:
    kind = verdict["kind"]
    found = unconfirmed.groups(verdict, results) if kind in TIER_KINDS else []
    if kind == "improved" and found:  # never "nothing to do" beside an unconfirmed faster cell
        cells = [c for c in verdict["cells"] if c["pairs"] > 0]
        best = next(c for c in cells if c["key"] == verdict["best_cell"])
        return (f"`{verdict['headline']}` stands on {_named(best, cells)}. For the ❓ rows: "
                f"{unconfirmed.actions(found)}")
    if kind == "inconclusive":
        more = _open_steps(verdict)
        if found or more:
            return unconfirmed.actions(found, more)
    elif found:
        return unconfirmed.actions(found)
    if kind == "unconfirmed" and any(w.get("stopped") == "box_time"
                                     for w in verdict.get("witnesses") or []):
        return CUT_BY_BOX_TIME
    if kind == "incorrect":
        return f"the PR changes what {changed_models(verdict)} computes; fix the numerics and push."
    if kind == "infra-error":
        return (f"not the PR's fault: {infra_reason(verdict)}. A maintainer can comment "
                "`/evalbot rerun` once that is fixed (`evalbot doctor` checks the box).")
    if kind in NEXT_STEPS:
        return NEXT_STEPS[kind]
    reasons = "; ".join(verdict.get("reasons") or [])
    return f"{reasons}." if reasons else "see the details below."


def _open_steps(verdict: dict[str, Any]) -> tuple[str, ...]:
    """The maintainer's steps for what keeps a verdict open besides its ❓ rows."""
    steps = []
    if undecided.undecided_cells(verdict):
        steps.append(undecided.maintainer_step())
    if any(c["pairs"] <= 0 for c in verdict["cells"]):
        steps.append(UNMEASURED)
    corr = [verdict.get("correctness") or {}, *(verdict.get("correctness_guards") or [])]
    if any(section.get("decision") == "inconclusive" for section in corr):
        steps.append(SCORE_AGAIN)
    return tuple(steps)


def job_dir(job_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", job_id)  # as the dashboard names its folder


def links(verdict: dict[str, Any], ctx: CommentContext) -> list[tuple[str, str]]:
    """(text, url) onward: the dashboard, this run's artifacts and its verdict file."""
    out = []
    job = verdict["provenance"].get("job_id") or ""
    if ctx.dashboard_url and job:  # the run's own page (report/run_page.py)
        out.append(("run page", f"{ctx.dashboard_url}/runs/{job_dir(job)}/index.html"))
    if ctx.dashboard_url:
        out.append(("dashboard", f"{ctx.dashboard_url}/index.html"))
    if ctx.run_url:
        out += [("artifacts", f"{ctx.run_url}/"), ("verdict.json", f"{ctx.run_url}/verdict.json")]
    return out


__all__ = ["NOT_MEASURED", "confidence", "headline", "label"]
