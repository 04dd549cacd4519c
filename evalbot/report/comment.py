"""What the PR comment says, as data for templates/comment.md.j2 (pure: verdict in, text out).

The first lines answer a contributor's four questions: did it get faster, where, how sure, what
next. Then the cells, slower ones first; everything else is folded. Unknown decisions and verdict
kinds (added by later policies) read as their own words rather than failing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalbot.grading.grade import ctx_name
from evalbot.report import unconfirmed
from evalbot.report.history import box_label, cell_page, recent_main
from evalbot.report.numbers import interval, pct, rate, sparkline

# How each cell decision reads, its mark, and its place in the table (slower first).
DECISIONS: dict[str, tuple[str, str, int]] = {
    "regressed": ("slower", "🔻", 0),
    "spoofed": ("speed not believed", "⛔", 0),
    "improved": ("faster", "🟢", 2),
    "unconfirmed": ("faster, not confirmed", "❓", 3),
    "inconclusive": ("undecided", "❔", 4),
    "neutral": ("unchanged", "", 6),
}
UNKNOWN_ORDER = 5  # a decision this module does not know sorts after the undecided ones
NOT_MEASURED = "not measured"  # a cell with no pairs: its run never started or failed
NOT_BELIEVED = "not believed"  # a figure the harness's clock did not back (report/publication.py)
# Verdicts where an unconfirmed cell is why a tier is missing (or lower): their first lines say
# why. A rejected PR's answer is its rejection; its ❓ rows stay in the table.
TIER_KINDS = ("improved", "neutral", "inconclusive", "unconfirmed")

NEXT_STEPS = {
    "improved": "nothing to do: it is faster and computes the same model.",
    "neutral": "nothing to do: no speed change to claim.",
    "regressed": "fix the 🔻 rows and push; evalbot measures every new head.",
    "incorrect": "the PR changes what the model computes; fix the numerics and push.",
    "inconclusive": ("the ❔ rows moved less than this box can resolve in one budget; comment "
                     "`/evalbot rerun` to measure again, or take the rest of the table as the "
                     "answer."),
    "unconfirmed": ("the speed the engine printed was not matched by the harness's own clock; "
                    "make sure the speed-up runs in the timed path, then push."),
    "spoofed": "the engine's reported speed disagrees with the harness's own clock; fix it and push.",
    "infra-error": ("not the PR's fault: the box or the harness failed. A maintainer can comment "
                    "`/evalbot rerun` once the box is healthy (`evalbot doctor` checks it)."),
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


def decision_word(decision: str) -> str:
    return DECISIONS.get(decision, (decision.replace("-", " ").replace("_", " "), "", 0))[0]


def rows(verdict: dict[str, Any], ctx: CommentContext) -> list[dict[str, Any]]:
    """One row per measured cell, slower first, then faster, undecided, unchanged."""
    many = len({c["model"] for c in verdict["cells"]}) > 1
    out = []
    for c in verdict["cells"]:
        if c["pairs"] <= 0:  # counted as "not measured" in the tally line, no row of n/a
            continue
        word, mark, order = DECISIONS.get(c["decision"], (decision_word(c["decision"]), "⚠️",
                                                          UNKNOWN_ORDER))
        equivalence = c.get("interval") == "equivalence"
        change = f"{pct(c['speedup'])} {interval(c['lo'], c['hi'])}{'ᵉ' if equivalence else ''}"
        if c.get("believed") is False:  # no figure of the PR's the bot does not believe
            change = NOT_BELIEVED
        where = f"{c['metric']} @ {ctx_name(c['ctx'])}"
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


def _tally(verdict: dict[str, Any]) -> dict[str, int]:
    """Cells per decision, a cell without pairs as not measured: the counts line's numbers."""
    tally: dict[str, int] = {}
    for c in verdict["cells"]:
        decision = c["decision"] if c["pairs"] > 0 else NOT_MEASURED
        tally[decision] = tally.get(decision, 0) + 1
    return tally


def counts(verdict: dict[str, Any]) -> str:
    """`**2 slower** · 0 faster · 1 unchanged · 1 undecided`: what happened, slower first."""
    tally = _tally(verdict)
    parts = []
    for decision in ("regressed", "improved", "neutral", "inconclusive"):
        parts.append((decision, tally.pop(decision, 0)))
    parts += sorted(tally.items())
    return " · ".join(f"**{n} {decision_word(d)}**" if n and DECISIONS.get(d, ("", "", 0))[2] == 0
                      else f"{n} {decision_word(d)}" for d, n in parts)


def headline(verdict: dict[str, Any]) -> str:
    """One sentence: the answer, with the cell that carries it."""
    kind, cells = verdict["kind"], [c for c in verdict["cells"] if c["pairs"] > 0]
    sure = confidence(verdict)
    if kind == "improved":
        best = next(c for c in cells if c["key"] == verdict["best_cell"])
        return (f"Faster ({sure} sure): {_named(best, cells)} {pct(best['speedup'])} "
                f"{interval(best['lo'], best['hi'])}")
    if kind == "regressed":
        slow = sorted((c for c in cells if c["decision"] == "regressed"), key=lambda c: c["speedup"])
        more = f" and {len(slow) - 2} more" if len(slow) > 2 else ""
        return f"Slower ({sure} sure): " + ", ".join(f"{_named(c, cells)} {pct(c['speedup'])} "
                                      f"{interval(c['lo'], c['hi'])}" for c in slow[:2]) + more
    if kind == "neutral":
        band = 100 * (verdict["provenance"].get("rule") or {}).get("tolerance", 0)
        return f"No speed change: every cell is within ±{band:g}% of main"
    if kind == "inconclusive":
        return _not_decided(verdict)
    if kind == "incorrect":
        return "Rejected: the PR changes what the model computes"
    if kind == "spoofed":
        return "Rejected: the speed the engine reported disagrees with the harness's own clock"
    if kind == "unconfirmed":
        return "Faster? Not confirmed: the harness's own clock did not see the claimed speed-up"
    return kind.replace("-", " ").capitalize()


# What keeps an inconclusive verdict open, per cell decision, as its headline says it.
OPEN = {"unconfirmed": "faster but not confirmed by evalbot's own timed run",
        "inconclusive": "undecided within the budget",
        NOT_MEASURED: "not measured within the budget"}  # only a budget stop is inconclusive


def _not_decided(verdict: dict[str, Any]) -> str:
    """`Not decided: 4 cells faster but not confirmed …; 3 unchanged`: the counts line's
    numbers, the ones that kept it open first (an undecided correctness check among them)."""
    tally = _tally(verdict)
    open_ = [f"{n} cell{'' if n == 1 else 's'} {OPEN[d]}" for d in OPEN
             for n in [tally.pop(d, 0)] if n]
    if (verdict.get("correctness") or {}).get("decision") == "inconclusive":
        open_.append("correctness undecided")
    rest = ", ".join(f"{n} {decision_word(d)}" for d, n in tally.items())
    return f"Not decided: {', '.join(open_) or 'see the table'}" + (f"; {rest}" if rest else "")


def _named(cell: dict[str, Any], cells: list[dict[str, Any]]) -> str:
    return unconfirmed.cell_name(cell, len({c["model"] for c in cells}) > 1)


def witness_lines(verdict: dict[str, Any]) -> list[str]:
    """One line per witness the harness timed: its pairs, what it showed, why it stopped short."""
    out = []
    for w in verdict.get("witnesses") or []:
        if w.get("source", "witness") != "witness":
            continue
        shown = sorted({c["status"] for c in (w.get("cells") or {}).values()}) or ["not judged"]
        cut = "; stopped at its share of the box time" if w.get("stopped") == "box_time" else ""
        n = w["pairs"]
        out.append(f"Witness `{w['name']}` (the harness's own clock): {n} usable "
                   f"pair{'' if n == 1 else 's'}, {', '.join(shown)}{cut}")
    return out


# A verdict that names no unconfirmed cell (an older one) but a witness cut for box time.
CUT_BY_BOX_TIME = ("evalbot's own timed run ran out of box time before it could confirm the "
                   "speed-up. Maintainer: raise `speed.witness_share` or `speed.budget_s` in the "
                   "profile, or comment `/evalbot rerun`. Contributor: "
                   f"{unconfirmed.NOTHING}.")


def why_lines(verdict: dict[str, Any], results: dict[str, Any] | None = None) -> list[str]:
    """Why each faster cell got no tier (unconfirmed.py), where that is the verdict's story."""
    if verdict["kind"] not in TIER_KINDS:
        return []
    return unconfirmed.lines(unconfirmed.groups(verdict, results))


def next_step(verdict: dict[str, Any], results: dict[str, Any] | None = None) -> str:
    kind = verdict["kind"]
    found = unconfirmed.groups(verdict, results) if kind in TIER_KINDS else []
    if found:  # never "nothing to do" beside a cell that measured faster and got no tier
        return _next_for_unconfirmed(verdict, found)
    if kind == "unconfirmed" and any(w.get("stopped") == "box_time"
                                     for w in verdict.get("witnesses") or []):
        return CUT_BY_BOX_TIME
    if kind in NEXT_STEPS:
        return NEXT_STEPS[kind]
    reasons = "; ".join(verdict.get("reasons") or [])
    return f"{reasons}." if reasons else "see the details below."


def _next_for_unconfirmed(verdict: dict[str, Any], found: list[unconfirmed.Group]) -> str:
    steps = unconfirmed.actions(found)
    if verdict["kind"] == "improved":
        cells = [c for c in verdict["cells"] if c["pairs"] > 0]
        best = next(c for c in cells if c["key"] == verdict["best_cell"])
        return f"`{verdict['headline']}` stands on {_named(best, cells)}. For the ❓ rows: {steps}"
    if any(c["decision"] == "inconclusive" and c["pairs"] > 0 for c in verdict["cells"]):
        undecided = NEXT_STEPS["inconclusive"]
        return f"{steps} {undecided[0].upper()}{undecided[1:]}"
    return steps


def links(verdict: dict[str, Any], ctx: CommentContext) -> list[tuple[str, str]]:
    """(text, url) onward: the dashboard, this run's artifacts and its verdict file."""
    out = []
    if ctx.dashboard_url:
        out.append(("dashboard", f"{ctx.dashboard_url}/index.html"))
    if ctx.run_url:
        out += [("artifacts", f"{ctx.run_url}/"), ("verdict.json", f"{ctx.run_url}/verdict.json")]
    return out


def confidence(verdict: dict[str, Any]) -> str:
    rule = verdict["provenance"].get("rule") or {}
    alpha = rule.get("alpha")
    return f"{100 * (1 - alpha):g}%" if alpha is not None else "95%"
