"""The narrow port: only the GitHub calls evalbot makes. pygithub_client.py implements it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from evalbot.config.errors import EvalbotError

WRITE_PERMISSIONS = frozenset({"admin", "maintain", "write"})
PAGE = 100  # items per page of a listing (GitHub's maximum)


class GitHubError(EvalbotError):
    """A GitHub call failed for good: a 4xx other than 401 and the rate limits. Retries that run
    out raise the Transient of their last try (evalbot/github/publish.py), not this class."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Transient(GitHubError):
    """5xx or a dropped connection: the write may or may not have happened on GitHub's side."""


class Unauthorized(GitHubError):
    """401: GitHub refuses the credentials (a token expired or revoked, a rotated App key, a
    clock skewed past the token's life). The token's condition, not the PR's: it passes when
    the credentials work again, and every request meets it until then."""


class RateLimited(GitHubError):
    """403/429 primary or secondary rate limit; retry_after is GitHub's advice in seconds."""

    def __init__(self, message: str, retry_after: float, status: int) -> None:
        super().__init__(message, status)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Comment:
    id: int
    author: str
    body: str


@dataclass(frozen=True)
class LabelInfo:
    name: str
    color: str
    description: str


@dataclass(frozen=True)
class PullInfo:
    number: int
    head_sha: str
    base_sha: str
    base_ref: str
    author: str
    draft: bool
    state: str
    fork: bool
    labels: tuple[str, ...]


class GitHubPort(Protocol):
    """Every method talks to one repository; names follow GitHub's operations."""

    def permission(self, login: str) -> str: ...  # admin | maintain | write | triage | read | none

    def pull(self, number: int) -> PullInfo: ...

    def open_pulls(self) -> list[PullInfo]: ...

    def open_pulls_page(self, page: int) -> list[PullInfo]: ...  # from 0, oldest first, PAGE each

    def comments(self, number: int) -> list[Comment]: ...

    def create_comment(self, number: int, body: str) -> Comment: ...

    def edit_comment(self, comment_id: int, body: str) -> None: ...  # gone: GitHubError 404

    def delete_comment(self, comment_id: int) -> None: ...  # already gone: no error

    def issue_labels(self, number: int) -> list[str]: ...

    def add_labels(self, number: int, names: list[str]) -> None: ...

    def remove_label(self, number: int, name: str) -> None: ...  # absent label: no error

    def repo_labels(self) -> list[LabelInfo]: ...

    def create_label(self, label: LabelInfo) -> None: ...

    def update_label(self, label: LabelInfo) -> None: ...

    def set_status(self, sha: str, state: str, description: str, context: str,
                   target_url: str = "") -> None: ...

    # ---- rounds (evalbot.github.rounds) -------------------------------------------------------
    def branch_sha(self, branch: str) -> str: ...

    def commit_date(self, sha: str) -> float: ...  # the committer date, epoch seconds

    def merge(self, number: int, sha: str, method: str) -> str: ...  # the merge commit's SHA

    def close_pull(self, number: int) -> None: ...

    def merged(self, number: int) -> str | None: ...  # the merge commit's SHA, if merged
