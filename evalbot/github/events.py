"""Webhook payloads parsed once, at the edge, into typed frozen events; handlers never see dicts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalbot.errors import EvalbotError

PR_ACTIONS = frozenset({"opened", "synchronize", "reopened", "ready_for_review", "closed",
                        "labeled"})


class PayloadError(EvalbotError):
    """A payload of a handled event lacks a field evalbot needs (names the field)."""


@dataclass(frozen=True)
class PullRequestEvent:
    action: str
    repo: str
    number: int
    head_sha: str
    base_sha: str
    author: str
    sender: str
    draft: bool
    fork: bool
    labels: tuple[str, ...]
    label: str | None  # the label just applied, for `labeled`


@dataclass(frozen=True)
class CommentEvent:
    repo: str
    number: int
    comment_id: int
    author: str
    body: str
    pr_author: str


Event = PullRequestEvent | CommentEvent


def parse_event(name: str, payload: Any) -> Event | None:
    """The typed event, or None for events and actions evalbot does not handle."""
    if not isinstance(payload, dict):
        raise PayloadError("payload is not a JSON object")
    action = payload.get("action")
    if name == "pull_request" and action in PR_ACTIONS:
        return _pull_request(action, payload)
    if name == "issue_comment" and action == "created":
        issue = _get(payload, "issue")
        if not isinstance(issue, dict) or "pull_request" not in issue:
            return None  # a comment on a plain issue
        return CommentEvent(repo=_get(payload, "repository", "full_name"),
                            number=int(_get(issue, "number")),
                            comment_id=int(_get(payload, "comment", "id")),
                            author=_get(payload, "comment", "user", "login"),
                            body=_get(payload, "comment", "body") or "",
                            pr_author=_get(issue, "user", "login"))
    return None


def _pull_request(action: str, payload: dict[str, Any]) -> PullRequestEvent:
    pr = _get(payload, "pull_request")
    head_repo = _get(pr, "head").get("repo")  # None when the fork was deleted
    base_repo = _get(pr, "base", "repo", "full_name")
    label = payload.get("label")
    return PullRequestEvent(
        action=action,
        repo=_get(payload, "repository", "full_name"),
        number=int(_get(pr, "number")),
        head_sha=_get(pr, "head", "sha"),
        base_sha=_get(pr, "base", "sha"),
        author=_get(pr, "user", "login"),
        sender=_get(payload, "sender", "login"),
        draft=bool(pr.get("draft", False)),
        fork=not isinstance(head_repo, dict) or head_repo.get("full_name") != base_repo,
        labels=tuple(str(lb.get("name")) for lb in pr.get("labels") or [] if isinstance(lb, dict)),
        label=str(label["name"]) if isinstance(label, dict) and "name" in label else None,
    )


def _get(doc: Any, *keys: str) -> Any:
    node = doc
    for i, key in enumerate(keys):
        if not isinstance(node, dict) or key not in node:
            raise PayloadError(f"payload field {'.'.join(keys[: i + 1])} is missing")
        node = node[key]
    return node
