"""Webhook payloads parsed once, at the edge, into typed frozen events; handlers never see dicts.

Every field evalbot uses is checked for its type (a SHA is 40 or 64 lowercase hex digits), and
every text of the payload, used or not, keys included, must be encodable as UTF-8 (JSON lets a
sender write a lone surrogate, `\\ud800`, which no database, log or HTTP request can carry): a
payload that fails is refused by the webhook with a 400 naming the field, never stored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from evalbot.config.errors import EvalbotError

_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")  # SHA-1, or SHA-256 object format
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # how JSON text writes one (or a pair)
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


def parse_delivery(name: str, body: bytes) -> Event | None:
    """parse_event for a delivery's raw body, the edge's fast path: JSON is UTF-8 (RFC 8259;
    GitHub sends nothing else), decoded strictly, so an encoded surrogate is refused here, and a
    text without a surrogate escape (\\uD800-\\uDFFF) needs no walk over every string."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PayloadError(f"body is not UTF-8 text at byte {exc.start} (a lone surrogate or "
                           "another invalid sequence)") from None
    payload = json.loads(text)
    return parse_event(name, payload, checked=not _SURROGATE_ESCAPE.search(text))


def parse_event(name: str, payload: Any, checked: bool = False) -> Event | None:
    """The typed event, or None for events and actions evalbot does not handle. `checked`: the
    caller knows every text of the payload encodes (parse_delivery)."""
    if not isinstance(payload, dict):
        raise PayloadError("payload is not a JSON object")
    if not checked:
        _check_text(payload)
    action = payload.get("action")
    if name == "pull_request" and action in PR_ACTIONS:
        return _pull_request(action, payload)
    if name == "issue_comment" and action == "created":
        issue = _get(payload, "issue")
        if not isinstance(issue, dict) or "pull_request" not in issue:
            return None  # a comment on a plain issue
        body = _get(payload, "comment", "body")
        if body is not None and not isinstance(body, str):
            raise PayloadError("payload field comment.body is not a string")
        return CommentEvent(repo=_str(payload, "repository", "full_name"),
                            number=_int(issue, "number"),
                            comment_id=_int(payload, "comment", "id"),
                            author=_str(payload, "comment", "user", "login"),
                            body=body or "",
                            pr_author=_str(issue, "user", "login"))
    return None


def _pull_request(action: str, payload: dict[str, Any]) -> PullRequestEvent:
    pr = _get(payload, "pull_request")
    head_repo = _get(pr, "head").get("repo")  # None when the fork was deleted
    base_repo = _get(pr, "base", "repo", "full_name")
    label = payload.get("label")
    labels = pr.get("labels") or []
    if not isinstance(labels, list) or not all(isinstance(lb, dict) and isinstance(
            lb.get("name"), str) for lb in labels):
        raise PayloadError("payload field pull_request.labels is not a list of named labels")
    if not isinstance(pr.get("draft", False), bool):
        raise PayloadError("payload field pull_request.draft is not a boolean")
    return PullRequestEvent(
        action=action,
        repo=_str(payload, "repository", "full_name"),
        number=_int(pr, "number"),
        head_sha=_sha(pr, "head", "sha"),
        base_sha=_sha(pr, "base", "sha"),
        author=_str(pr, "user", "login"),
        sender=_str(payload, "sender", "login"),
        draft=pr.get("draft", False),
        fork=not isinstance(head_repo, dict) or head_repo.get("full_name") != base_repo,
        labels=tuple(lb["name"] for lb in labels),
        label=_str(payload, "label", "name") if isinstance(label, dict) else None,
    )


def _check_text(payload: dict[str, Any]) -> None:
    """Every string and key encodes as UTF-8. One C-speed pass over the whole document; only a
    payload that fails it is walked, to name the field."""
    try:
        json.dumps(payload, ensure_ascii=False).encode("utf-8")
        return
    except UnicodeEncodeError:
        pass
    stack: list[tuple[str, Any]] = [("", payload)]
    while stack:
        path, node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) \
            if isinstance(node, list) else ()
        for key, value in items:
            where = f"{path}.{key}" if path else str(key)
            if not _encodable(str(key)):
                raise PayloadError(f"payload key under {path or 'the top level'} is not valid "
                                   "Unicode text (a lone surrogate)")
            if isinstance(value, str) and not _encodable(value):
                raise PayloadError(f"payload field {where} is not valid Unicode text (a lone "
                                   "surrogate)")
            stack.append((where, value))
    raise PayloadError("payload text is not valid Unicode (a lone surrogate)")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _str(doc: Any, *keys: str) -> str:
    value = _get(doc, *keys)
    if not isinstance(value, str) or not value:
        raise PayloadError(f"payload field {'.'.join(keys)} is not a non-empty string")
    return value


def _int(doc: Any, *keys: str) -> int:
    value = _get(doc, *keys)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PayloadError(f"payload field {'.'.join(keys)} is not a positive integer")
    return value


def _sha(doc: Any, *keys: str) -> str:
    value = _get(doc, *keys)
    if not isinstance(value, str) or not _SHA.fullmatch(value):
        raise PayloadError(f"payload field {'.'.join(keys)} is not a full commit SHA")
    return value


def _get(doc: Any, *keys: str) -> Any:
    node = doc
    for i, key in enumerate(keys):
        if not isinstance(node, dict) or key not in node:
            raise PayloadError(f"payload field {'.'.join(keys[: i + 1])} is missing")
        node = node[key]
    return node
