"""Publishing to a PR: one sticky comment, evalbot's labels, a commit status; idempotent.

The sticky comment is the bot's own comment whose first line is the hidden marker; a marker in
anyone else's comment is ignored. Creating a comment is the one non-idempotent write: after an
ambiguous failure (5xx, dropped connection) the comments are listed again before another create,
so a 502 sent after GitHub stored the comment cannot produce a second one; a reply carries a
hidden key (the comment it answers) and is not posted when one under that key exists. Every
text written passes `neutral.quiet_mentions`: evalbot's comments notify nobody.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from evalbot.engine.contract.verdict import upgrade as upgrade_verdict
from evalbot.engine.contract.verdict import validate as validate_verdict
from evalbot.github.labels_sync import LabelFamily
from evalbot.github.port import Comment, GitHubError, GitHubPort, RateLimited, Transient
from evalbot.report.neutral import quiet_mentions
from evalbot.report.render import MARKER_PREFIX

T = TypeVar("T")
FAILING_KINDS = {"regressed", "incorrect", "build-failed", "crashed", "timeout"}
STICKY_TRIES = 3  # the sticky comment deleted under us this often in one write: try later


@dataclass
class Backoff:
    """Retries rate limits (honouring Retry-After) and transient errors, a bounded number of times.

    A rate limit also closes a gate: no request goes out through this Backoff before
    `not_before` (GitHub's Retry-After or reset, on `clock`), whichever caller asks. A wait
    longer than `max_wait_s` is not slept here: RateLimited is raised with the time left, and
    the dispatcher pauses that long (interruptibly) before it tries the delivery again."""

    tries: int = 5
    max_wait_s: float = 300.0
    transient_wait_s: float = 1.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    waits: list[float] = field(default_factory=list)  # what was slept, for logs and tests
    not_before: float = 0.0  # on `clock`
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def call(self, fn: Callable[[], T], *, retry_transient: bool = True) -> T:
        for attempt in range(1, self.tries + 1):
            self._hold_off()
            try:
                return fn()
            except RateLimited as exc:
                self.defer(exc.retry_after)
                if attempt == self.tries or exc.retry_after > self.max_wait_s:
                    raise
                self._wait(exc.retry_after)
            except Transient:
                if not retry_transient or attempt == self.tries:
                    raise
                self._wait(self.transient_wait_s * 2 ** (attempt - 1))
        raise AssertionError("unreachable: the loop returns or raises")

    def defer(self, seconds: float) -> None:
        """Close the gate for `seconds` from now (never reopening it earlier than set)."""
        with self._lock:
            self.not_before = max(self.not_before, self.clock() + seconds)

    def remaining(self) -> float:
        return max(0.0, self.not_before - self.clock())

    def _hold_off(self) -> None:
        left = self.remaining()
        if left > self.max_wait_s:
            raise RateLimited(f"GitHub asked for no requests for {left:.0f} s more", left, 429)
        if left > 0:
            self._wait(left)

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
    `evalbot.github.shadow.ShadowPublisher` records the same writes in the store instead."""

    backoff: Backoff  # GitHub reads (permissions, PR heads) go through it in both

    def publish(self, number: int, sha: str, body: str, labels: list[str], state: str,
                description: str, target_url: str = "") -> None: ...

    def publish_verdict(self, number: int, verdict: dict[str, Any], comment: str) -> None: ...

    def sticky(self, number: int, body: str) -> None: ...

    def reply(self, number: int, text: str, key: str) -> None: ...

    def unlabel(self, number: int, name: str) -> None: ...

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
        # what reaches the PR is a verdict of this version (one stored by an older evalbot, upgraded)
        validate_verdict(upgrade_verdict(verdict))
        job = verdict["provenance"].get("job_id")
        target = f"{self.reports_url}/runs/{job}/" if self.reports_url and job else ""
        self.publish(number, verdict["provenance"]["head_sha"], comment, list(verdict["labels"]),
                     status_state(verdict["kind"]), f"{verdict['headline']}: {verdict['kind']}",
                     target)

    def sticky(self, number: int, body: str) -> None:
        """The one comment says `body`. A person may delete it between our listing and our
        edit (GitHub answers 404 on the comment): it is listed again and a new one made."""
        body = quiet_mentions(body)
        for _ in range(STICKY_TRIES):
            if self._sticky_once(number, body):
                return
        raise Transient(f"the evalbot comment on #{number} was deleted {STICKY_TRIES} times "
                        "while it was written")

    def _sticky_once(self, number: int, body: str) -> bool:
        """False when the comment was deleted under us."""
        ours = self._ours(number)
        if not ours:
            made = self._create(number, body, lambda: next(iter(self._ours(number)), None))
            # Listed again: a writer racing us (another process, a create GitHub stored after
            # it timed out) shows up now, and the duplicates go while we are here.
            ours = self._ours(number) or [made]
        keep, extra = ours[0], ours[1:]
        if keep.body != body:
            try:
                self.backoff.call(lambda: self.port.edit_comment(keep.id, body))
            except GitHubError as exc:
                if exc.status != 404:  # a 404 here is the comment's; the PR's fails the listing
                    raise
                return False
        for dup in extra:  # heal duplicates left by an earlier race: keep the oldest
            self.backoff.call(lambda d=dup: self.port.delete_comment(d.id))  # type: ignore[misc]
        return True

    def reply(self, number: int, text: str, key: str) -> None:
        """A one-off comment (help, refusals), never the sticky marker; idempotent by `key` (the
        comment or event it answers): a reply under that key already there is not posted again,
        so a 502 after GitHub stored it, or the dispatcher retrying the delivery, leaves one."""
        body = f"{quiet_mentions(text)}\n\n{reply_marker(key)}"
        if self._reply_under(number, key) is None:
            self._create(number, body, lambda: self._reply_under(number, key))

    def unlabel(self, number: int, name: str) -> None:
        """Remove one label (any label: the approval label when it does not count)."""
        self.backoff.call(lambda: self.port.remove_label(number, name))

    def labels(self, number: int, wanted: list[str]) -> None:
        existing = {lb.name.lower() for lb in self.backoff.call(self.port.repo_labels)}
        for name in wanted:
            if name.lower() not in existing:
                self._create_label(name)
        current = self.backoff.call(lambda: self.port.issue_labels(number))
        for name in current:
            if self.family.owns(name) and name not in wanted:
                self.backoff.call(lambda n=name: self.port.remove_label(number, n))  # type: ignore[misc]
        missing = [n for n in wanted if n not in current]
        if missing:
            self.backoff.call(lambda: self.port.add_labels(number, missing))

    def _create_label(self, name: str) -> None:
        style = self.family.style(name)
        try:
            self.backoff.call(lambda: self.port.create_label(style))
        except GitHubError as exc:  # 422 already_exists: a 502 came after GitHub created it
            if exc.status != 422:
                raise

    def status(self, sha: str, state: str, description: str, target_url: str = "") -> None:
        self.backoff.call(lambda: self.port.set_status(sha, state, description, self.context,
                                                       target_url))

    def _ours(self, number: int) -> list[Comment]:
        comments = self.backoff.call(lambda: self.port.comments(number))
        return sorted((c for c in comments if is_ours(c, self.bot_login)), key=lambda c: c.id)

    def _reply_under(self, number: int, key: str) -> Comment | None:
        mark = reply_marker(key)
        comments = self.backoff.call(lambda: self.port.comments(number))
        return next((c for c in comments if c.author == self.bot_login
                     and c.body.rstrip().endswith(mark)), None)

    def _create(self, number: int, body: str, stored: Callable[[], Comment | None]) -> Comment:
        """Create a comment once: after an ambiguous failure, `stored` looks for it first."""
        for _ in range(self.backoff.tries):
            try:
                return self.backoff.call(lambda: self.port.create_comment(number, body),
                                         retry_transient=False)
            except Transient:
                found = stored()  # did GitHub store it before failing?
                if found is not None:
                    return found
                self.backoff._wait(self.backoff.transient_wait_s)
        # Transient: the dispatcher keeps the delivery and tries again later (at least once).
        raise Transient(f"could not create the evalbot comment on #{number}")


def reply_marker(key: str) -> str:
    """The hidden last line of a reply: which comment or event it answers."""
    return f"<!-- evalbot:reply {' '.join(key.split())[:100]} -->"
