"""What maintainer overrides do: hold, unhold, waive (with a reason), measure more. Pure: the
audit trail they are read from is the store's (evalbot/store/overrides.py).

- hold / unhold: a held PR gets no evaluation until a maintainer lifts the hold.
- waive: accept a failed gate (a regression, a correctness reject) for one head, with a reason;
  the verdict stays as measured and the waiver is shown next to it.
- measure more: a new attempt of the same SHAs with a larger pair budget (`scale_job`); its
  samples are pooled with the earlier run's (`pool`, a pure function) before grading.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Sequence
from typing import Any, Protocol

from evalbot.config.errors import ResultsError
from evalbot.engine.contract.job import Job
from evalbot.engine.contract.shared import replay
from evalbot.grading.sequential import EQUIVALENCE_ALPHA, rule_lists, schedule

WAIVABLE = frozenset({"regressed", "incorrect"})  # failed gates; a build failure is not a gate
DEFAULT_FACTOR = 2.0  # measure-more doubles the pair budget unless the config says otherwise


class Entry(Protocol):
    """One row of the audit trail (evalbot.store.overrides.Entry), as shown and applied here."""

    @property
    def head_sha(self) -> str: ...
    @property
    def action(self) -> str: ...
    @property
    def who(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def factor(self) -> float: ...
    @property
    def at(self) -> float: ...


# ---- measure more: a larger pair budget, then pooling ------------------------------------------
def scale_job(job: Job, factor: float) -> Job:
    """The same job with every look (and the time budget) multiplied by `factor`."""
    if not factor > 1.0:
        raise ValueError(f"measure-more factor {factor}: must be above 1")
    rule = job.rule
    looks = sorted({max(2, math.ceil(n * factor)) for n in rule.looks})
    family = rule.family or len(job.cells)
    bounds = schedule(looks, family, rule.alpha, rule.equivalence_alpha, rule.pool_df,
                      rule.rule_version)
    cap = None if rule.max_budget_s is None else rule.max_budget_s * factor  # stays >= budget_s
    scaled = dataclasses.replace(rule, looks=looks, budget_s=rule.budget_s * factor,
                                 max_budget_s=cap, family=family,
                                 **rule_lists(bounds, rule.rule_version))
    return dataclasses.replace(job, rule=scaled)


def pool(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """One results document holding both runs' pairs of every cell, ready for grading.

    The later run's pairs follow the earlier's. The pooled rule looks at the earlier run's
    looks and then at each later look shifted by the earlier pair cap; its critical values are
    recomputed for that longer schedule (Bonferroni over every look, so the earlier looks are
    judged more strictly than they were), and every cell's looks are replayed under it.
    """
    _check_poolable(earlier, later)
    e_rule, l_rule = earlier["rule"], later["rule"]
    cap = max(e_rule["looks"])
    looks = sorted({*e_rule["looks"], *(cap + n for n in l_rule["looks"])})
    family = int(l_rule.get("family") or len(later["cells"]))
    eq_alpha = float(l_rule.get("equivalence_alpha") or EQUIVALENCE_ALPHA)
    version = int(l_rule.get("rule_version") or 1)
    bounds = schedule(looks, family, float(l_rule["alpha"]), eq_alpha,
                      int(l_rule.get("pool_df") or 0), version)
    rule = {**l_rule, "looks": looks, **rule_lists(bounds, version),
            "equivalence_alpha": eq_alpha, "family": family,
            "budget_s": float(e_rule["budget_s"]) + float(l_rule["budget_s"])}
    if e_rule.get("max_budget_s") is not None and l_rule.get("max_budget_s") is not None:
        rule["max_budget_s"] = float(e_rule["max_budget_s"]) + float(l_rule["max_budget_s"])
    later_cells = {replay.cell_key(c): c for c in later["cells"]}
    cells = [_pool_cell(c, later_cells[replay.cell_key(c)]) for c in earlier["cells"]]
    for cell, looks in zip(cells, replay.replay_all(cells, rule), strict=True):
        cell["looks"] = [lk.to_dict() for lk in looks]
    doc = copy.deepcopy(later)
    doc.update(rule=rule, cells=cells,
               pooled_from=[earlier["job_id"], later["job_id"]],
               timing={"total_s": _total(earlier) + _total(later)})
    return doc


def _pool_cell(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    offset = max((s["pair"] for s in first["samples"]), default=-1) + 1
    seq = max((s.get("seq", 0) for s in first["samples"]), default=-1) + 1
    moved = [{**s, "pair": s["pair"] + offset, "seq": s.get("seq", 0) + seq}
             for s in second["samples"]]
    cell = {**copy.deepcopy(second), "samples": copy.deepcopy(first["samples"]) + moved}
    cell["stopped"] = f"pooled two runs: {first.get('stopped', '')} / {second.get('stopped', '')}"
    return cell


def _check_poolable(earlier: dict[str, Any], later: dict[str, Any]) -> None:
    """Only runs of the same SHAs, profile, box and decision rule measure the same thing."""
    same = {
        "base SHA": (earlier["base"]["sha"], later["base"]["sha"]),
        "head SHA": (earlier["head"]["sha"], later["head"]["sha"]),
        "profile": (earlier["profile"], later["profile"]),
        "box": (earlier["box"].get("name"), later["box"].get("name")),
        "cells": (sorted(map(replay.cell_key, earlier["cells"])),
                  sorted(map(replay.cell_key, later["cells"]))),
    }
    for key in ("significance", "tolerance", "alpha", "sd_floor", "sd_floors"):
        same[f"rule.{key}"] = (earlier["rule"].get(key), later["rule"].get(key))
    for what, (a, b) in same.items():
        if a != b:
            raise ResultsError(f"cannot pool runs {earlier['job_id']} and {later['job_id']}: "
                               f"their {what} differ ({a!r} vs {b!r})")
    for doc in (earlier, later):
        if doc["failures"]:
            raise ResultsError(f"cannot pool run {doc['job_id']}: it failed at "
                               f"{doc['failures'][0]['stage']}")
        if not doc["rule"].get("alpha"):
            raise ResultsError(f"cannot pool run {doc['job_id']}: its rule records no alpha")


def _total(doc: dict[str, Any]) -> float:
    return float((doc.get("timing") or {}).get("total_s", 0.0))


# ---- shown next to the verdict ----------------------------------------------------------------
def apply_waiver(verdict: dict[str, Any], entry: Entry) -> dict[str, Any]:
    """The verdict as measured, marked waived: the commit status turns to success."""
    if verdict["kind"] not in WAIVABLE:
        raise ValueError(f"a {verdict['kind']} verdict has no failed gate to waive")
    out = copy.deepcopy(verdict)
    out["waiver"] = {"who": entry.who, "reason": entry.reason, "at": entry.at,
                     "head_sha": entry.head_sha}
    return out


def status_of(verdict: dict[str, Any]) -> tuple[str, str] | None:
    """The commit status (state, description) a waived verdict gets; None when not waived."""
    waiver = verdict.get("waiver")
    if not waiver:
        return None
    return "success", f"{verdict['headline']} waived by {waiver['who']}"


def comment_note(entries: Sequence[Entry]) -> str:
    """Markdown for the PR comment: the overrides of this PR, newest last; '' when none."""
    if not entries:
        return ""
    lines = ["", "<details><summary>Maintainer overrides</summary>", "",
             "| when (UTC) | who | what | head | why |", "|---|---|---|---|---|"]
    for e in entries:
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(e.at))
        what = f"measure-more ×{e.factor:g}" if e.action == "measure-more" else e.action
        lines.append(f"| {when} | {_neutral(e.who)} | {what} | `{e.head_sha[:10]}` | "
                     f"{_neutral(e.reason) or '-'} |")
    return "\n".join([*lines, "", "</details>", ""])


def _neutral(text: str) -> str:
    """Reasons are maintainers' free text: no mentions, HTML or table breaks in the comment."""
    out = text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    out = out.replace("@", "@\u200b").replace("`", "'")
    return " ".join(out.split())


NOTE_OPEN, NOTE_CLOSE = "<!-- evalbot-overrides -->", "<!-- /evalbot-overrides -->"


def with_note(body: str, entries: Sequence[Entry]) -> str:
    """The comment body with its overrides section replaced (or added, or removed when none)."""
    if NOTE_OPEN not in body and not entries:
        return body
    head, _, rest = body.partition(NOTE_OPEN)
    tail = rest.partition(NOTE_CLOSE)[2] if rest else ""
    note = comment_note(entries)
    section = f"{NOTE_OPEN}{note}{NOTE_CLOSE}\n" if note else ""
    return head.rstrip("\n") + "\n" + section + tail.lstrip("\n")


def decorate(trail: Sequence[Entry], verdict: dict[str, Any],
             comment: str) -> tuple[dict[str, Any], str]:
    """What the service publishes for a verdict, given its PR's audit trail (oldest first): the
    latest waiver of this very head applied (a new push needs a new one), the overrides section
    in the comment. The commit status is `status_of(verdict)` if any."""
    head = verdict["provenance"]["head_sha"]
    waivers = [e for e in trail if e.action == "waive" and e.head_sha == head]
    if waivers and verdict["kind"] in WAIVABLE:
        verdict = apply_waiver(verdict, waivers[-1])
    return verdict, with_note(comment, trail)
