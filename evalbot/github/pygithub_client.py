"""The GitHub port over PyGithub: the only module that imports `github`.

PyGithub's own retry is switched off (retry=None): its default retries POST on 5xx, which turns
a 502 that GitHub answered after creating a comment into a second comment. Retries, rate-limit
back-off and the re-check after an ambiguous write live in publish.py instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import requests
from github import Auth, Github, GithubException, UnknownObjectException

from evalbot.github.port import (
    PAGE,
    Comment,
    GitHubError,
    LabelInfo,
    PullInfo,
    RateLimited,
    Transient,
    Unauthorized,
)

T = TypeVar("T")
SECONDARY_WAIT_S = 60.0  # GitHub's advice when a secondary limit names no Retry-After


class PyGithubPort:
    def __init__(self, repo: str, token: str | Auth.Auth, api_url: str, *, throttle: bool = True,
                 timeout_s: int = 15, request_interval_s: float = 0.25,
                 write_interval_s: float = 1.0) -> None:
        """throttle: PyGithub spaces requests and writes by the intervals (GitHubConfig's)."""
        auth = token if isinstance(token, Auth.Auth) else Auth.Token(token)  # App: app_auth.py
        self._gh = Github(auth=auth, base_url=api_url.rstrip("/"), retry=None,
                          timeout=timeout_s, per_page=PAGE, lazy=True,
                          seconds_between_requests=request_interval_s if throttle else None,
                          seconds_between_writes=write_interval_s if throttle else None)
        self._repo = self._gh.get_repo(repo)
        self.full_name = repo

    def permission(self, login: str) -> str:
        def get() -> str:
            try:
                return str(self._repo.get_collaborator_permission(login))
            except UnknownObjectException:
                return "none"  # no such user: no permission
        return _call(get)

    def pull(self, number: int) -> PullInfo:
        return _call(lambda: _pull_info(self._repo.get_pull(number), self.full_name))

    def open_pulls(self) -> list[PullInfo]:
        return _call(lambda: [_pull_info(p, self.full_name)
                              for p in self._repo.get_pulls(state="open")])

    def open_pulls_page(self, page: int) -> list[PullInfo]:
        """One page of the open PRs, oldest first: a listing of thousands is read page by page,
        each page retried on its own, and a PR opened meanwhile lands on a later page."""
        return _call(lambda: [_pull_info(p, self.full_name) for p in self._repo.get_pulls(
            state="open", sort="created", direction="asc").get_page(page)])

    def comments(self, number: int) -> list[Comment]:
        return _call(lambda: [Comment(c.id, c.user.login, c.body or "")
                              for c in self._repo.get_issue(number).get_comments()])

    def create_comment(self, number: int, body: str) -> Comment:
        def create() -> Comment:
            c = self._repo.get_issue(number).create_comment(body)
            return Comment(c.id, c.user.login, c.body or "")
        return _call(create)

    def edit_comment(self, comment_id: int, body: str) -> None:
        _call(lambda: self._repo.get_issue(0).get_comment(comment_id).edit(body))

    def delete_comment(self, comment_id: int) -> None:
        def delete() -> None:
            try:
                self._repo.get_issue(0).get_comment(comment_id).delete()
            except GithubException as exc:
                if exc.status != 404:  # deleted already (a person, a racing writer): as wanted
                    raise
        _call(delete)

    def issue_labels(self, number: int) -> list[str]:
        return _call(lambda: [lb.name for lb in self._repo.get_issue(number).get_labels()])

    def add_labels(self, number: int, names: list[str]) -> None:
        if names:
            _call(lambda: self._repo.get_issue(number).add_to_labels(*names))

    def remove_label(self, number: int, name: str) -> None:
        def remove() -> None:
            try:
                self._repo.get_issue(number).remove_from_labels(name)
            except GithubException as exc:
                if exc.status != 404:  # "Label does not exist": already gone is what we want
                    raise
        _call(remove)

    def repo_labels(self) -> list[LabelInfo]:
        return _call(lambda: [LabelInfo(lb.name, lb.color, lb.description or "")
                              for lb in self._repo.get_labels()])

    def create_label(self, label: LabelInfo) -> None:
        _call(lambda: self._repo.create_label(label.name, label.color, label.description))

    def update_label(self, label: LabelInfo) -> None:
        _call(lambda: self._repo.get_label(label.name).edit(label.name, label.color,
                                                             label.description))

    def set_status(self, sha: str, state: str, description: str, context: str,
                   target_url: str = "") -> None:
        link = {"target_url": target_url} if target_url else {}
        _call(lambda: self._repo.get_commit(sha).create_status(
            state, description=description[:140], context=context, **link))

    def branch_sha(self, branch: str) -> str:
        return _call(lambda: str(self._repo.get_branch(branch).commit.sha))

    def commit_date(self, sha: str) -> float:
        return _call(lambda: self._repo.get_commit(sha).commit.committer.date.timestamp())

    def merge(self, number: int, sha: str, method: str) -> str:
        # sha: GitHub refuses (409) if the head moved since it was evaluated. No admin override:
        # the merge goes through branch protection like anyone's.
        return _call(lambda: str(self._repo.get_pull(number).merge(
            merge_method=method, sha=sha).sha))

    def close_pull(self, number: int) -> None:
        _call(lambda: self._repo.get_pull(number).edit(state="closed"))

    def merged(self, number: int) -> str | None:
        def read() -> str | None:
            p = self._repo.get_pull(number)
            return str(p.merge_commit_sha) if p.merged else None
        return _call(read)


def _pull_info(p: Any, full_name: str) -> PullInfo:
    head_repo = p.head.repo
    return PullInfo(number=p.number, head_sha=p.head.sha, base_sha=p.base.sha,
                    base_ref=p.base.ref, author=p.user.login, draft=bool(p.draft),
                    state=p.state, fork=head_repo is None or head_repo.full_name != full_name,
                    labels=tuple(lb.name for lb in p.labels))


def _call(fn: Callable[[], T]) -> T:
    with _translated():
        return fn()


@contextmanager
def _translated() -> Iterator[None]:
    """PyGithub and requests exceptions become the port's kinds (evalbot.github.port)."""
    try:
        yield
    except GithubException as exc:
        raise _from_github(exc) from exc
    except requests.exceptions.RequestException as exc:  # reset, timeout, a truncated answer
        raise Transient(f"GitHub unreachable: {type(exc).__name__}") from exc


def _from_github(exc: GithubException) -> GitHubError:
    headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
    data = exc.data if isinstance(exc.data, dict) else {}
    message = str(data.get("message", "")) or f"HTTP {exc.status}"
    if exc.status in (403, 429) and (exc.status == 429 or "retry-after" in headers
                                     or "rate limit" in message.lower()
                                     or headers.get("x-ratelimit-remaining") == "0"):
        return RateLimited(f"GitHub rate limit ({exc.status}): {message}",
                           _retry_after(headers), exc.status)
    if exc.status == 401:
        return Unauthorized(f"GitHub refused the credentials (401): {message}", 401)
    if exc.status >= 500:
        return Transient(f"GitHub error {exc.status}: {message}", exc.status)
    return GitHubError(f"GitHub refused ({exc.status}): {message}", exc.status)


def _retry_after(headers: dict[str, str]) -> float:
    """Retry-After first; else the primary limit's reset time; else GitHub's one minute."""
    try:
        if "retry-after" in headers:
            return max(0.0, float(headers["retry-after"]))
        if headers.get("x-ratelimit-remaining") == "0" and "x-ratelimit-reset" in headers:
            return max(0.0, float(headers["x-ratelimit-reset"]) - time.time()) + 1.0
    except ValueError:
        pass
    return SECONDARY_WAIT_S
