"""Every message evalbot posts on GitHub besides the verdict: rendered from templates/."""

from __future__ import annotations

from evalbot.github.commands import REGISTRY
from evalbot.report.render import environment, marker_line


def pending_comment(head_sha: str, state: str, note: str, context: str) -> str:
    return environment().get_template("pending.md.j2").render(
        marker=marker_line(head_sha, state), head_sha=head_sha, state=state, note=note, context=context)


def help_comment(approval_label: str) -> str:
    return environment().get_template("help.md.j2").render(commands=REGISTRY,
                                                           approval_label=approval_label)


def refusal(login: str, author_may_command: bool) -> str:
    who = "people with write access to this repository" + \
        (" and the PR's author" if author_may_command else "")
    return f"@{login} sorry, evalbot takes commands only from {who}."


def approval_refused(login: str, label: str) -> str:
    return (f"@{login} the `{label}` label approves an evaluation only when someone with write "
            "access applies it; it was removed. A maintainer can apply it.")
