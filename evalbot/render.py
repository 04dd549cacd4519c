"""Render verdicts to markdown with jinja2 (strict undefined); everything passes the redactor."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jinja2

from evalbot.grading import ctx_name
from evalbot.redact import Redactor
from evalbot.report import DROP_ORDER, details

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
MARKER_PREFIX = "<!-- evalbot:v1 "
COMMENT_LIMIT = 65536
LOG_TAIL_CAP = 3000
ICONS = {"improved": "✅", "neutral": "➖", "inconclusive": "❔", "infra-error": "⚠️"}


def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # markdown; untrusted text is neutralised by `_neutral` instead
        keep_trailing_newline=True,
    )


def marker(verdict: dict[str, Any]) -> str:
    return marker_line(verdict["provenance"]["head_sha"], verdict["kind"])


def marker_line(head_sha: str, kind: str) -> str:
    """The hidden first line by which the bot finds its own comment again."""
    return f"{MARKER_PREFIX}{json.dumps({'head': head_sha, 'kind': kind}, sort_keys=True)} -->"


def _redact_body(text: str, redact: Redactor) -> str:
    """Redact all but the marker line: it is ours (a SHA and a kind), and a box literal that
    happened to match inside it would hide the comment from the next verdict."""
    first, _, rest = text.partition("\n")
    return f"{first}\n{redact(rest)}"


def render_comment(verdict: dict[str, Any], redact: Redactor | None = None,
                   results: dict[str, Any] | None = None) -> str:
    """The PR comment; details are folded, and dropped (bulkiest first) to fit GitHub's limit."""
    redact = redact or Redactor()
    env = environment()
    if verdict["failures"]:
        text = env.get_template("failure.md.j2").render(
            marker=marker(verdict), icon="❌" if verdict["kind"] != "infra-error" else "⚠️",
            verdict=verdict, failures=[_failure(f, redact) for f in verdict["failures"]])
        return _fit(_redact_body(text, redact))
    sections = details(verdict, results)
    context = dict(marker=marker(verdict), icon=ICONS.get(verdict["kind"], "❌"), verdict=verdict,
                   summary=summary(verdict), models=_models(verdict), correctness=_corr(verdict),
                   reasons=verdict["reasons"], rule=verdict["provenance"]["rule"],
                   family=len(verdict["cells"]))
    for drop in (None, *DROP_ORDER):
        if drop is not None:
            sections.pop(drop, None)
        text = _redact_body(env.get_template("comment.md.j2").render(
            **context, details=sections, trimmed=drop is not None), redact)
        if len(text) <= COMMENT_LIMIT:
            return text
    return _fit(text)


def _fit(text: str) -> str:
    """Last resort: cut at a line boundary and say so (only reachable with huge log tails)."""
    if len(text) <= COMMENT_LIMIT:
        return text
    note = "\n\n*(trimmed to fit GitHub's comment size limit)*\n"
    cut = text.rfind("\n", 0, COMMENT_LIMIT - len(note))
    return text[:cut] + note


def summary(verdict: dict[str, Any]) -> str:
    """The one headline sentence: verdict, best cell with its interval, correctness."""
    kind = verdict["kind"]
    corr = verdict["correctness"]["decision"]
    if kind == "improved":
        best = next(c for c in verdict["cells"] if c["key"] == verdict["best_cell"])
        return (f"**{best['metric']} at {ctx_name(best['ctx'])}: {_pct(best['speedup'])} "
                f"({_pct(best['lo'])} to {_pct(best['hi'])})**, tier {verdict['tier']}; "
                f"correctness {corr}.")
    texts = {
        "neutral": "No material speed change in any cell",
        "inconclusive": "Some cells stayed undecided within the pair budget",
        "regressed": "Slower: " + ", ".join(verdict["regression_labels"]),
        "incorrect": "The PR no longer computes the same model",
    }
    return f"{texts.get(kind, kind)}; correctness {corr}."


def _pct(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{100 * x:+.1f}%"


def _rate(x: float | None, unit: str) -> str:
    return "n/a" if x is None else f"{x:,.1f} {unit}"


def _models(verdict: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for model in verdict["models"]:
        cells = [
            {"metric": c["metric"], "ctx_name": ctx_name(c["ctx"]),
             "base": _rate(c["base_median"], c["unit"]), "head": _rate(c["head_median"], c["unit"]),
             "change": f"{_pct(c['speedup'])} ({_pct(c['lo'])} … {_pct(c['hi'])})",
             "pairs": c["pairs"], "decision": c["decision"]}
            for c in verdict["cells"] if c["model"] == model["name"] and c["pairs"] > 0
        ]
        out.append({**model, "cells": cells})
    return out


def _corr(verdict: dict[str, Any]) -> dict[str, Any] | None:
    c = verdict["correctness"]
    if c["decision"] == "not-scored":
        return None

    def ci(d: dict[str, float], kl: bool = False) -> str:
        """top-1 as a fraction; KL with 3 significant digits (an exact engine reads ~1e-12)."""
        lo, mid, hi = (f"{d[k]:.3g}" if kl else f"{d[k]:.4f}" for k in ("lo", "mean", "hi"))
        return f"{mid} ({lo} … {hi})"

    floors = c.get("floors") or {}
    cons = c.get("consistency") or {}
    return {
        "decision": c["decision"], "tokens": c["tokens"], "seed": c["seed"],
        "path": _neutral(str(c["path"])), "chunks": c.get("chunks", "?"),
        "base_top1": ci(c["base"]["top1"]), "head_top1": ci(c["head"]["top1"]),
        "base_kl": ci(c["base"]["kl"], kl=True), "head_kl": ci(c["head"]["kl"], kl=True),
        "diff_top1": ci(c["diff_top1"]), "diff_kl": ci(c["diff_kl"], kl=True),
        "growth": " → ".join(f"{lk['tokens']} ({lk['decision']})" for lk in c.get("looks", [])),
        "margins": f"top-1 −{100 * c.get('margin', 0):g} pt, KL +{c.get('kl_margin', 0):g}",
        "mcnemar": "n/a" if c.get("mcnemar_p") is None else f"{c['mcnemar_p']:.2g}",
        "discordant": c.get("discordant") or {"head_only_right": 0, "base_only_right": 0},
        "floors": (f"top-1 ≥ {floors['top1']:g}, KL ≤ {floors['kl']:g} "
                   f"({'calibrated from main' if floors.get('calibrated') else 'policy default'})"
                   + ("; main is below them: reference drift, not applied" if c.get("drift")
                      else "")) if floors else "n/a",
        "consistency": _consistency_text(cons),
        "notes": [_neutral(str(n)) for n in c.get("notes") or []],
    }


def _consistency_text(cons: dict[str, Any]) -> str:
    if not cons.get("checked"):
        return f"not checked ({cons.get('note') or 'no greedy tokens recorded'})"
    parts = [f"{r['key']} {'main' if r['side'] == 'base' else 'PR'}: "
             f"{r['mismatches']}/{r['compared']} mismatches" for r in cons.get("cells", [])]
    verdict = "MISMATCH" if cons.get("head_mismatch") else "consistent"
    return f"{verdict} ({'; '.join(parts)})"


def _failure(f: dict[str, Any], redact: Redactor) -> dict[str, Any]:
    return {**f, "message": _neutral(redact(f["message"])),
            "log_tail": _neutral(redact(f.get("log_tail", "")[-LOG_TAIL_CAP:]))}


def _neutral(text: str) -> str:
    """Untrusted text inside a fence: no fence breaks, mentions, markers or HTML."""
    return (text.replace("```", "ʼʼʼ").replace("@", "@\u200b").replace("<", "&lt;")
            .replace(">", "&gt;"))


def render_labels(verdict: dict[str, Any]) -> str:
    return "\n".join(verdict["labels"]) + "\n"
