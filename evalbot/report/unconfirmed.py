"""Why a cell that measured faster got no tier, and whose action can change that (pure).

An `unconfirmed` cell's printed rates claim a saving that no witness, evalbot's own timed run of
the cell's work, confirmed (docs/trust.md). The comment's first lines say, per group of such
cells, what happened to their witness; its Next line names only actions that can change the
outcome, each with whose it is. Only the verdict (and, when given, the results) is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalbot.grading import faulty_box, unexplained_cost
from evalbot.grading.confirmation import FLOOR_STALE, STALE_REASON, WALL_ONLY, WALL_REASON
from evalbot.grading.grade import ctx_name
from evalbot.report.decisions import decision_word, shown_decision
from evalbot.report.numbers import signed
from evalbot.report.witness_view import WitnessView, witness_views

OWN_RUN = "evalbot's own timed run"
RERUN = "comment `/evalbot rerun`"
# The same code measured again meets the same witnesses: said so, so no one re-pushes in hope;
# but only where no action named beside it measures again (a rerun can change the verdict).
NOTHING = "nothing in the PR; re-pushing the same code does not change this verdict"
NOTHING_TO_CHANGE = "nothing in the PR"
MEASURES_AGAIN = ("`/evalbot rerun`", "`/evalbot measure-more`")


@dataclass(frozen=True)
class Why:
    """What happened to the witness of some faster cells, and what can change it."""

    reason: str  # follows "faster, not confirmed: "
    short: str  # the headline's few words for the same reason ("no witness")
    maintainer: str = ""  # "": no maintainer action changes it
    contributor: str = NOTHING
    cut: bool = False  # its witness was stopped for box time (evalbot witness-cut lists these)
    lead: str = decision_word("unconfirmed")  # what the row's cells are said to be


@dataclass(frozen=True)
class Group:
    cells: tuple[str, ...]  # as the table names them
    why: Why


# A saving the harness's clock does not show, on the run's own wall times or on a box that
# showed faults: not REJECT-grade, and measuring again may settle it
NO_SAVING = {WALL_ONLY: Why(WALL_REASON, "the harness's clock shows no saving", maintainer=RERUN),
             faulty_box.FAULTY_BOX: Why(faulty_box.FAULTY_BOX_REASON, "the box showed faults",
                                        maintainer=RERUN)}


def unconfirmed_cells(verdict: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [c for c in verdict.get("cells") or []
            if c["decision"] == "unconfirmed" and c["pairs"] > 0]


def groups(verdict: Mapping[str, Any], results: Mapping[str, Any] | None = None) -> list[Group]:
    """The unconfirmed cells grouped by why, in the verdict's order of cells."""
    cells = unconfirmed_cells(verdict)
    if not cells:
        return []
    views = witness_views(verdict, results)
    rule = (verdict.get("provenance") or {}).get("rule") or {}
    many = len({c["model"] for c in verdict["cells"]}) > 1
    by_why: dict[Why, list[dict[str, Any]]] = {}
    uncovered = []
    for cell in cells:
        why = NO_SAVING.get(cell.get("confirmation") or "") or _unbelieved(cell, rule, views) \
            or _why(cell["key"], views, rule)
        if why is None:
            uncovered.append(cell)
        else:
            by_why.setdefault(why, []).append(cell)
    if uncovered:  # one line for them all, naming the cells as the profile's witnesses do
        by_why[_no_witness(uncovered, many)] = uncovered
    return [Group(tuple(cell_name(c, many) for c in group), why) for why, group in by_why.items()]


def short(found: list[Group]) -> str:
    """`(no witness)`, `(3 no witness, 1 witness cut for box time)`: the headline's why."""
    by_short: dict[str, int] = {}
    for g in found:
        by_short[g.why.short] = by_short.get(g.why.short, 0) + len(g.cells)
    if len(by_short) == 1:
        return f"({next(iter(by_short))})"
    return "(" + ", ".join(f"{n} {text}" for text, n in by_short.items()) + ")"


def lines(found: list[Group]) -> list[str]:
    """`❓ decode @ 128: faster, not confirmed: …` per group."""
    return [f"❓ {', '.join(g.cells)}: {g.why.lead}: {g.why.reason}" for g in found]


def actions(found: list[Group], more: tuple[str, ...] = ()) -> str:
    """`Maintainer: …. Contributor: ….`: each actor's actions once (`more`: the maintainer's
    for other rows, such as the undecided ones); the contributor's "nothing" only where they
    have no action at all, and "re-pushing does not change it" only where no maintainer action
    beside it measures again."""
    maintainer = _unique([*(g.why.maintainer for g in found), *more])
    contributor = _unique(g.why.contributor for g in found if g.why.contributor != NOTHING)
    again = any(word in m for m in maintainer for word in MEASURES_AGAIN)
    parts = [f"Maintainer: {'; '.join(maintainer)}."] if maintainer else []
    parts.append(f"Contributor: {'; '.join(contributor) or (NOTHING_TO_CHANGE if again else NOTHING)}.")
    return " ".join(parts)


def _unique(texts: Any) -> list[str]:
    return list(dict.fromkeys(t for t in texts if t))


def cell_name(cell: Mapping[str, Any], many: bool) -> str:
    """`decode @ 4k`, with the model first when the verdict has several."""
    where = f"{cell['metric']} @ {ctx_name(cell['ctx'])}"
    return f"{cell['model']} {where}" if many else where


def _why(key: str, views: list[WitnessView], rule: Mapping[str, Any]) -> Why | None:
    """None: no witness covers the cell, as far as the verdict (and results) tell."""
    covering = [w for w in views if w.covers is not None and key in w.covers]
    if not covering:
        unknown = [w for w in views if w.covers is None]
        return _unjudged(unknown[0], rule) if unknown else None
    w = max(covering, key=lambda v: v.pairs)  # the one that came closest to a judgement
    if w.stopped == "not_needed":
        return Why(f"its witness `{w.name}` was not run: another witness had settled the "
                   "verdict, which this cell could not change", "witness not needed")
    if w.stopped == FLOOR_STALE:  # the box's stored pairs refute its floor (docs/statistics.md)
        return Why(f"{STALE_REASON} (`{w.name}` was not run: its noise floor on this box is "
                   "refuted by its recent pairs)", "witness floor stale",
                   maintainer=f"run `evalbot calibrate` on the box (or wait for its periodic "
                              f"A/A, which measures the floor again), then {RERUN}")
    if not w.ran:
        return _not_run(w, rule)
    if w.head_failed:
        return Why(f"the PR's output in {OWN_RUN} (`{w.name}`) failed or did not agree with "
                   "main's", "PR's output failed in its witness",
                   contributor=f"make the PR's output in `{w.name}` agree with main's, then push")
    if w.pairs < w.first_look:
        return _short(w, rule)
    return _not_shown(w, rule)


def _unbelieved(cell: Mapping[str, Any], rule: Mapping[str, Any],
                views: list[WitnessView]) -> Why | None:
    """A cell not believed for time the harness measured (issue 53), not for a missing saving:
    its witness could not rule out a slowdown of the witness margin, none could time it,
    or the time is unaccounted for."""
    if cell.get("confirmation") == unexplained_cost.UNTIMED and _spared(cell["key"], views):
        # the harness stops every witness once one cell cannot be believed: that cell's line
        # says what to change; this one's says only why it has no time of its own
        return Why("its witness was not run: another cell (a regression, or a cell not "
                   "believed) had already settled the verdict", "witness not needed",
                   lead=decision_word(shown_decision(cell)))
    reasons = {
        unexplained_cost.NOT_RULED_OUT: (unexplained_cost.not_ruled_out_reason(rule),
                                         "slowdown not ruled out"),
        unexplained_cost.UNTIMED: (unexplained_cost.UNTIMED_REASON, "not timed"),
        unexplained_cost.COST: (unexplained_cost.COST_REASON, "time unaccounted for")}
    if cell.get("confirmation") not in reasons:
        return None
    reason, short = reasons[cell["confirmation"]]
    return Why(reason.removesuffix("; not believed"), short, maintainer=RERUN,
               lead=decision_word(shown_decision(cell)),
               contributor="make the harness's timed run of this cell's work as fast as main's, "
                           "or print the slowdown, then push")


def _spared(key: str, views: list[WitnessView]) -> bool:
    """Every witness covering the cell was left out as not needed."""
    covering = [w for w in views if w.covers is not None and key in w.covers]
    return bool(covering) and all(w.stopped == "not_needed" for w in covering)


def _box_time(w: WitnessView, rule: Mapping[str, Any]) -> str:
    """The maintainer's levers on a witness's box time: the profile's share and budget."""
    share = f" (now {rule['witness_share']:g})" if rule.get("witness_share") else ""
    budget = f" (now {rule['budget_s']:g} s)" if rule.get("budget_s") else ""
    return (f"raise `speed.witness_share`{share} or `speed.budget_s`{budget} in the profile "
            f"for `{w.name}`, or {RERUN}")


def _not_run(w: WitnessView, rule: Mapping[str, Any]) -> Why:
    if w.stopped == "box_time":
        return Why(f"its witness `{w.name}` was not run: no box time was left for it",
                   "no box time left for its witness", maintainer=_box_time(w, rule), cut=True)
    return Why(f"its witness `{w.name}` was not run", "witness not run",
               maintainer=f"{RERUN} to run `{w.name}`")


def _short(w: WitnessView, rule: Mapping[str, Any]) -> Why:
    """Fewer usable pairs than its first look: cut for box time, or pairs dropped."""
    of = f"{w.pairs} of its {w.first_look} pairs" if w.looks else \
        f"{w.pairs} of the {w.first_look} pairs a judgement needs"
    if w.stopped == "box_time":
        return Why(f"{OWN_RUN} reached {of} (`{w.name}`, stopped for box time)",
                   "witness cut for box time", maintainer=_box_time(w, rule), cut=True)
    return Why(f"{OWN_RUN} kept {of} (`{w.name}`; the others were dropped)",
               "witness kept too few pairs", maintainer=_measure_again(w))


def _not_shown(w: WitnessView, rule: Mapping[str, Any]) -> Why:
    """Judged, and the saving it measured does not confirm the claim. A saving seen but inside
    the witness's noise may confirm when measured again; none seen needs a faster head."""
    seen = (w.saving_s or 0.0) > 0
    cut = w.stopped == "box_time"
    detail = f"`{w.name}`, {w.pairs} pairs{', then stopped for box time' if cut else ''}"
    if w.saving_s is not None:
        detail += f": {_saving(w.saving_s, w.claimed_s, seen)}"
    return Why(f"{OWN_RUN} did not show the saving ({detail})",
               "witness did not show the saving",
               _box_time(w, rule) if cut else _measure_again(w) if seen else "",
               contributor=f"make the saving show in the work `{w.name}` times (the "
                           "engine's own run, not only its printed rate), then push", cut=cut)


def _saving(saving_s: float, claimed_s: float, seen: bool) -> str:
    measured, claimed = signed(saving_s, ".2f"), signed(claimed_s, ".2f")
    if seen:
        return (f"{measured} s saved a run on average where the printed rates claim "
                f"{claimed} s, within its noise")
    if saving_s < 0:  # never "−0.03 s saved": a loss is said as one
        return (f"the PR's runs took {abs(saving_s):.2f} s longer than main's where the printed "
                f"rates claim {claimed} s saved")
    return f"{measured} s saved a run where the printed rates claim {claimed} s"


def _measure_again(w: WitnessView) -> str:
    return f"{RERUN} to measure `{w.name}` again"


def _unjudged(w: WitnessView, rule: Mapping[str, Any]) -> Why:
    """Without the results a witness judged on no pairs names no cells: say only what is known."""
    why = _not_run(w, rule) if not w.ran else _short(w, rule)
    return Why(f"no witness judged it; {why.reason}", why.short, why.maintainer, why.contributor,
               why.cut)


def _no_witness(cells: list[dict[str, Any]], many: bool) -> Why:
    keys = ", ".join(f"{c['model']} " * many + f"{c['metric']}@{c['ctx']}" for c in cells)
    this = "this cell" if len(cells) == 1 else "these cells"
    return Why(f"no witness covers {this} ({keys})", "no witness",
               maintainer=f"add a witness covering {keys} to the profile")
