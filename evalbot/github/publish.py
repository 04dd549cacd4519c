"""Publishing to a PR: one sticky comment, evalbot's labels, a commit status; idempotent.

The sticky comment is the bot's own comment whose first line is the hidden marker; a marker in
anyone else's comment is ignored. Creating a comment is the one non-idempotent write: after an
ambiguous failure (5xx, dropped connection) the comments are listed again before another create,
so a 502 sent after GitHub stored the comment cannot produce a second one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from evalbot.github.labels_sync import LabelFamily
from evalbot.github.port import Comment, GitHubError, GitHubPort, RateLimited, Transient
from evalbot.render import MARKER_PREFIX

T = TypeVar("T")
FAILING_KINDS = {"regressed", "incorrect", "build-failed", "crashed", "timeout"}


@dataclass
class Backoff:
    """Retries rate limits (honouring Retry-After) and transient errors, a bounded number of times."""

    tries: int = 5
    max_wait_s: float = 300.0
    transient_wait_s: float = 1.0
    sleep: Callable[[float], None] = time.sleep
    waits: list[float] = field(default_factory=list)  # what was slept, for logs and tests

    def call(self, fn: Callable[[], T], *, retry_transient: bool = True) -> T:
        for attempt in range(1, self.tries + 1):
            try:
                return fn()
            except RateLimited as exc:
                if attempt == self.tries or exc.retry_after > self.max_wait_s:
                    raise
                self._wait(exc.retry_after)
            except Transient:
                if not retry_transient or attempt == self.tries:
                    raise
                self._wait(self.transient_wait_s * 2 ** (attempt - 1))
        raise AssertionError("unreachable: the loop returns or raises")

    def _wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.sleep(seconds)


def status_state(kind: str) -> str:
    if kind == "infra-error":
        return "error"
    return "failure" if kind in FAILING_KINDS else "success"


def is_ours(comment: Comment, bot_login: str) -> bool:
    first = comment.body.lstrip().split("\n", 1)[0]
    return comment.author == bot_login and first.startswith(MARKER_PREFIX)


class PublisherProtocol(Protocol):
    """What the handlers and the workers publish through: `Publisher` writes to GitHub,
    `evalbot.shadow.ShadowPublisher` records the same writes in the store instead."""

    backoff: Backoff  # GitHub reads (permissions, PR heads) go through it in both

    def publish(self, number: int, sha: str, body: str, labels: list[str], state: str,
                description: str, target_url: str = "") -> None: ...

    def publish_verdict(self, number: int, verdict: dict[str, Any], comment: str) -> None: ...

    def sticky(self, number: int, body: str) -> None: ...

    def reply(self, number: int, text: str) -> None: ...

    def labels(self, number: int, wanted: list[str]) -> None: ...

    def status(self, sha: str, state: str, description: str, target_url: str = "") -> None: ...


class Publisher:
    def __init__(self, port: GitHubPort, bot_login: str, family: LabelFamily,
                 context: str = "evalbot", backoff: Backoff | None = None,
                 reports_url: str = "") -> None:
        self.port, self.bot_login, self.family, self.context = port, bot_login, family, context
        self.backoff = backoff or Backoff()
        self.reports_url = reports_url.rstrip("/")  # the status links to runs/<job>/ under it

    def publish(self, number: int, sha: str, body: str, labels: list[str], state: str,
                description: str, target_url: str = "") -> None:
        """Comment, labels, then status last: the status transition is what notifies people."""
        self.sticky(number, body)
        self.labels(number, labels)
        self.status(sha, state, description, target_url)

    def publish_verdict(self, number: int, verdict: dict[str, Any], comment: str) -> None:
        job = verdict["provenance"].get("job_id")
        target = f"{self.reports_url}/runs/{job}/" if self.reports_url and job else ""
        self.publish(number, verdict["provenance"]["head_sha"], comment, list(verdict["labels"]),
                     status_state(verdict["kind"]), f"{verdict['headline']}: {verdict['kind']}",
                     target)

    def sticky(self, number: int, body: str) -> None:
        ours = self._ours(number)
        if not ours:
            ours = [self._create(number, body)]
        keep, extra = ours[0], ours[1:]
        if keep.body != body:
            self.backoff.call(lambda: self.port.edit_comment(keep.id, body))
        for dup in extra:  # heal duplicates left by an earlier race: keep the oldest
            self.backoff.call(lambda d=dup: self.port.delete_comment(d.id))  # type: ignore[misc]

    def reply(self, number: int, text: str) -> None:
        """A one-off comment (help, refusals); never carries the marker."""
        self.backoff.call(lambda: self.port.create_comment(number, text), retry_transient=False)

    def labels(self, number: int, wanted: list[str]) -> None:
        existing = {lb.name.lower() for lb in self.backoff.call(self.port.repo_labels)}
        for name in wanted:
            if name.lower() not in existing:
                style = self.family.style(name)
                self.backoff.call(lambda s=style: self.port.create_label(s))  # type: ignore[misc]
        current = self.backoff.call(lambda: self.port.issue_labels(number))
        for name in current:
            if self.family.owns(name) and name not in wanted:
                self.backoff.call(lambda n=name: self.port.remove_label(number, n))  # type: ignore[misc]
        missing = [n for n in wanted if n not in current]
        if missing:
            self.backoff.call(lambda: self.port.add_labels(number, missing))

    def status(self, sha: str, state: str, description: str, target_url: str = "") -> None:
        self.backoff.call(lambda: self.port.set_status(sha, state, description, self.context,
                                                       target_url))

    def _ours(self, number: int) -> list[Comment]:
        comments = self.backoff.call(lambda: self.port.comments(number))
        return sorted((c for c in comments if is_ours(c, self.bot_login)), key=lambda c: c.id)

    def _create(self, number: int, body: str) -> Comment:
        for _ in range(self.backoff.tries):
            try:
                return self.backoff.call(lambda: self.port.create_comment(number, body),
                                         retry_transient=False)
            except Transient:
                found = self._ours(number)  # did GitHub store it before failing?
                if found:
                    return found[0]
                self.backoff._wait(self.backoff.transient_wait_s)
        raise GitHubError(f"could not create the evalbot comment on #{number}")
