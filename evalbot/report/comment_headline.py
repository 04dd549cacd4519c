"""The comment's headline and its label text: one sentence each, true of the verdict's fields.

The headline answers "did it get faster" with the cell that carries the answer; an undecided
verdict counts what kept it open as the counts line counts it, each with its reason (issue 48:
"not confirmed by evalbot's own timed run" stood where no such run existed). A tier's label
states its lower bound beside it: `eval:XL` on +76% [+1.9%, +204%] says at least +1.9%.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalbot.report import unconfirmed
from evalbot.report.decisions import decision_word, shown_decision, wall_clock_only
from evalbot.report.numbers import interval, pct

NOT_MEASURED = "not measured"  # a cell with no pairs: its run never started or failed
# What keeps an inconclusive verdict open, per cell decision, as its headline says it.
OPEN = {"unconfirmed": "faster but not confirmed",
        "unbelieved": "not believed",  # unconfirmed, held for time (decisions.shown_decision)
        "inconclusive": "undecided within the budget",
        NOT_MEASURED: "not measured within the budget"}  # only a budget stop is inconclusive
# the shown decisions the ❓ lines explain: a line's lead (unconfirmed.Why.lead) is the word
EXPLAINED = ("unconfirmed", "unbelieved")


def tally(verdict: Mapping[str, Any]) -> dict[str, int]:
    """Cells per decision, a cell without pairs as not measured: the counts line's numbers."""
    out: dict[str, int] = {}
    for c in verdict["cells"]:
        decision = shown_decision(c) if c["pairs"] > 0 else NOT_MEASURED
        out[decision] = out.get(decision, 0) + 1
    return out


def confidence(verdict: Mapping[str, Any]) -> str:
    rule = verdict["provenance"].get("rule") or {}
    alpha = rule.get("alpha")
    return f"{100 * (1 - alpha):g}%" if alpha is not None else "95%"


def headline(verdict: Mapping[str, Any], results: Mapping[str, Any] | None = None) -> str:
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
        on_wall = sum(wall_clock_only(c, verdict) for c in cells)
        alone = f" ({on_wall} of them on the run's wall clock only)" if on_wall else ""
        return f"No speed change: every cell is within ±{band:g}% of main{alone}"
    if kind == "inconclusive":
        return _not_decided(verdict, results)
    if kind == "incorrect":
        return f"Rejected: the PR changes what {changed_models(verdict)} computes"
    if kind == "spoofed":
        return "Rejected: the speed the engine reported disagrees with the harness's own clock"
    if kind == "unconfirmed":
        return "Faster? Not confirmed: the harness's own clock did not see the claimed speed-up"
    if kind == "infra-error":
        return f"Not judged, not the PR's fault: {infra_reason(verdict)}"
    return kind.replace("-", " ").capitalize()


def label(verdict: Mapping[str, Any]) -> str:
    """`` `eval:XL`, at least +1.9% ``: a tier beside the lower bound of the cell that earned
    it, so the label never reads as more than the measurement; other labels as they are."""
    text = f"`{verdict['headline']}`"
    if verdict["kind"] != "improved" or not verdict.get("best_cell"):
        return text
    best = next((c for c in verdict["cells"] if c["key"] == verdict["best_cell"]), None)
    if best is None or best.get("lo") is None:
        return text
    cells = [c for c in verdict["cells"] if c["pairs"] > 0]
    return f"{text}, at least {pct(best['lo'])} ({_named(best, cells)})"


def changed_models(verdict: Mapping[str, Any]) -> str:
    """`the model`, or the guard models that rejected where the scored one did not."""
    if (verdict.get("correctness") or {}).get("decision") == "reject":
        return "the model"
    guards = [str(g.get("model") or "a guard model")
              for g in verdict.get("correctness_guards") or [] if g.get("decision") == "reject"]
    return f"the guard model {', '.join(f'`{g}`' for g in guards)}" if guards else "the model"


def infra_reason(verdict: Mapping[str, Any]) -> str:
    """Which part could not be judged: a cell never measured, or a model's unusable reference."""
    corr = verdict.get("correctness") or {}
    guards = [g for g in verdict.get("correctness_guards") or []
              if g.get("decision") == "infra-error"]
    unmeasured = [c for c in verdict["cells"] if c["pairs"] <= 0]
    if corr.get("decision") == "infra-error":
        return "the correctness reference or main's scoring is unusable"
    if guards:
        names = ", ".join(f"`{g.get('model') or 'guard model'}`" for g in guards)
        return f"the correctness reference of the guard model {names} is unusable"
    if unmeasured:
        n = len(unmeasured)
        return f"{n} cell{'' if n == 1 else 's'} got no measurement"
    return "the box or the harness failed"


def _not_decided(verdict: Mapping[str, Any], results: Mapping[str, Any] | None) -> str:
    """`Not decided: 4 cells faster but not confirmed (no witness); 3 unchanged`: the counts
    line's numbers, the ones that kept it open first (an undecided correctness check among
    them), each unconfirmed count with the reasons its ❓ lines give."""
    counts = tally(verdict)
    open_ = []
    for decision, words in OPEN.items():
        n = counts.pop(decision, 0)
        if not n:
            continue
        why = f" {unconfirmed.short(_explaining(verdict, results, decision))}" \
            if decision in EXPLAINED else ""
        open_.append(f"{n} cell{'' if n == 1 else 's'} {words}{why}")
    undecided = [str(g.get("model") or "a guard model") for g in
                 verdict.get("correctness_guards") or [] if g.get("decision") == "inconclusive"]
    if (verdict.get("correctness") or {}).get("decision") == "inconclusive":
        open_.append("correctness undecided")
    elif undecided:
        open_.append(f"correctness of {', '.join(f'`{m}`' for m in undecided)} undecided")
    rest = ", ".join(f"{n} {decision_word(d)}" for d, n in counts.items())
    return f"Not decided: {', '.join(open_) or 'see the table'}" + (f"; {rest}" if rest else "")


def _explaining(verdict: Mapping[str, Any], results: Mapping[str, Any] | None,
                decision: str) -> list[unconfirmed.Group]:
    """The ❓ groups of the cells shown as `decision`."""
    return [g for g in unconfirmed.groups(verdict, results) if g.why.lead == decision_word(decision)]


def _named(cell: Mapping[str, Any], cells: list[Mapping[str, Any]]) -> str:
    return unconfirmed.cell_name(cell, len({c["model"] for c in cells}) > 1)
