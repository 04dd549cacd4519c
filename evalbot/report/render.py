"""Render verdicts to markdown with jinja2 (strict undefined): from the verdict and results as
they may be published (evalbot/report/publication.py) alone; everything passes the redactor."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import jinja2

from evalbot.config.redact import Redactor
from evalbot.config.resources import TEMPLATES_DIR
from evalbot.report import box_time_view, comment, comment_correctness
from evalbot.report.comment import CommentContext
from evalbot.report.decisions import UNCONFIRMED_MARK, UNDECIDED_MARK
from evalbot.report.details import DROP_ORDER, details
from evalbot.report.neutral import neutral
from evalbot.report.public_results import public_results
from evalbot.report.publication import public_verdict

TEMPLATES = TEMPLATES_DIR
MARKER_PREFIX = "<!-- evalbot:v1 "
COMMENT_LIMIT = 65536
LOG_TAIL_CAP = 3000
ICONS = {"improved": "✅", "neutral": "➖", "inconclusive": UNDECIDED_MARK, "infra-error": "⚠️",
         "regressed": "❌", "incorrect": "❌", "spoofed": "❌", "unconfirmed": UNCONFIRMED_MARK}
_GITHUB_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


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
                   results: dict[str, Any] | None = None,
                   context: CommentContext | None = None) -> str:
    """The PR comment; details are folded, and dropped (bulkiest first) to fit GitHub's limit.
    Whatever it is given, it renders only what the publication rule lets through."""
    redact = redact or Redactor()
    verdict = public_verdict(verdict)
    results = public_results(results) if results else None
    ctx = context or CommentContext()
    env = environment()
    if verdict["failures"]:
        text = env.get_template("failure.md.j2").render(**_failure_context(verdict, redact, ctx))
        return _fit(_redact_body(text, redact))
    sections = details(verdict, results)
    values = _comment_context(verdict, ctx, results)
    for drop in (None, *DROP_ORDER):
        if drop is not None:
            sections.pop(drop, None)
        text = _redact_body(env.get_template("comment.md.j2").render(
            **values, details=sections, trimmed=drop is not None), redact)
        if len(text) <= COMMENT_LIMIT:
            return text
    return _fit(text)


def _comment_context(verdict: dict[str, Any], ctx: CommentContext,
                     results: dict[str, Any] | None = None) -> dict[str, Any]:
    corr = verdict["correctness"]
    table_rows = comment.rows(verdict, ctx)
    head = comment.headline(verdict, results)
    if verdict["kind"] == "incorrect" and corr.get("base") and corr.get("decision") == "reject":
        head += f" ({comment_correctness.top1_drop(corr)})"
    return dict(
        marker=marker(verdict), icon=_icon(verdict), verdict=verdict,
        head=head, counts=comment.counts(verdict), label=comment.label(verdict),
        counts_plain=comment.counts(verdict).replace("**", ""),
        corr_line=comment_correctness.line(corr), next=comment.next_step(verdict, results),
        why=comment.why_lines(verdict, results),
        links=comment.links(verdict, ctx), rows=table_rows,
        show_history=any(r["history"] for r in table_rows),
        wall_clock_only=any(comment.wall_clock_only(c, verdict) for c in verdict["cells"]),
        has_equivalence=any(c.get("interval") == "equivalence" for c in verdict["cells"]),
        fold_speed=verdict["kind"] == "incorrect",
        corr_table=comment_correctness.table(corr) if comment_correctness.matters(corr) else None,
        corr_details=comment_correctness.details(corr), confidence=comment.confidence(verdict),
        rule=verdict["provenance"]["rule"], family=len(verdict["cells"]),
        repo_arg=_repo_arg(ctx),
        verdict_url=f"{ctx.run_url}/verdict.json" if ctx.run_url else "",
        guards=[_guard_text(g) for g in verdict.get("correctness_guards") or []],
        witnesses=comment.witness_lines(verdict),
        box_time=box_time_view.summary(verdict, results),
        gpu=bool((verdict["provenance"].get("box") or {}).get("gpu_start")),
    )


def _icon(verdict: dict[str, Any]) -> str:
    """The verdict's mark; an undecided verdict kept open only by ❓ rows shows ❓."""
    kind = verdict["kind"]
    if kind == "inconclusive" and any(c["decision"] == "unconfirmed" for c in verdict["cells"]) \
            and not any(c["decision"] == "inconclusive" for c in verdict["cells"]):
        return UNCONFIRMED_MARK
    return ICONS.get(kind, "⚠️")


def _repo_arg(ctx: CommentContext) -> str:
    """The repository as `evalbot eval --repo` takes it: the given clone text (ours, not the
    PR's), a GitHub clone URL for owner/name, else the quoted path."""
    if ctx.clone:
        return ctx.clone
    if _GITHUB_REPO.match(ctx.repo):
        return f"https://github.com/{ctx.repo}.git"
    return shlex.quote(ctx.repo) if ctx.repo else '"$ENGINE_REPO"'


def _failure_context(verdict: dict[str, Any], redact: Redactor,
                     ctx: CommentContext) -> dict[str, Any]:
    failures = [_failure(f, redact) for f in verdict["failures"]]
    pr = any(f["attribution"] == "pr" for f in failures)
    return dict(marker=marker(verdict), icon="❌" if pr else "⚠️", verdict=verdict,
                failures=failures, pr=pr, links=comment.links(verdict, ctx),
                head=_failure_headline(failures[0], pr))


def _failure_headline(f: dict[str, Any], pr: bool) -> str:
    side = {"head": " on the PR", "base": " on main"}.get(f["side"], "")
    if pr and f["kind"] == "spoofed":  # measured, and refused: the harness's clock said no
        return ("Rejected by the harness's clock: the PR's printed rates do not fit the time "
                "its processes ran")
    if pr:
        return f"Not measured: the {f['stage']} step failed{side} (main passed it)"
    return f"Not measured: the {f['stage']} step failed{side}; not the PR's fault"


def _fit(text: str) -> str:
    """Last resort: cut at a line boundary and say so (only reachable with huge log tails)."""
    if len(text) <= COMMENT_LIMIT:
        return text
    note = "\n\n*(trimmed to fit GitHub's comment size limit)*\n"
    cut = text.rfind("\n", 0, COMMENT_LIMIT - len(note))
    return text[:cut] + note


def _failure(f: dict[str, Any], redact: Redactor) -> dict[str, Any]:
    """A failure of the published verdict: its fixed sentence (report/failure_text.py)."""
    return {**f, "message": _neutral(redact(f["message"])), "log_tail": ""}


def _neutral(text: str) -> str:
    """Untrusted text inside a fence: no fence breaks, mentions, markers or HTML."""
    return neutral(text)  # evalbot/report/neutral.py: shared with the GitHub replies


def _guard_text(g: dict[str, Any]) -> str:
    """One line per other model scored the same way (it can reject the PR too)."""
    if g["decision"] == "not-scored":
        return f"{g.get('model') or 'guard model'}: not scored"
    return (f"{g.get('model') or 'guard model'} (scored the same way): {g['decision']}; "
            f"PR − main top-1 {g['diff_top1']['mean']:+.4f}, KL {g['diff_kl']['mean']:+.3g} "
            f"over {g['tokens']} tokens")

