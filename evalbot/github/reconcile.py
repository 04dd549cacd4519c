"""The reconcile: GitHub's open PRs compared with the store, on its own thread.

GitHub does not redeliver the webhooks that failed while the service was down, so at start, and
`every_s` after each pass ends, the open PRs are listed page by page (oldest first) and every
PR whose head the store does not know is admitted as its push would have been. A head the store
knows costs no GitHub call; an unknown one costs about seven (about 3 s under production
throttling), so a pass after an outage over thousands of PRs takes hours. It therefore never runs
on the dispatcher's thread: webhooks, commands and cancels are handled meanwhile, and a PR is
acted on by one thread at a time (evalbot.github.writing.PrLocks). `progress` says how far the pass
got (`/metrics`: evalbot.service.queue_metrics.reconcile_gauges).

Errors: a rate limit is the token's, so the pass waits as GitHub asks and goes on (the process's
shared gate holds every other publisher back too). A PR that GitHub refuses or fails is left for
the next pass; three such PRs in a row (GitHub down, the token revoked) or any other error (the
store's disk full, a bug) end the pass, which starts again after a back-off of 5 s doubling to
5 minutes. Only stop() ends the thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from evalbot.github.port import PAGE, GitHubError, PullInfo, RateLimited
from evalbot.store.jobs import Store

if TYPE_CHECKING:
    from evalbot.github.handlers import Handlers

log = logging.getLogger("evalbot.github")
T = TypeVar("T")
CAP_S = 300.0
FAILURES_IN_A_ROW = 3  # PRs failing one after another: it is GitHub or the token, not the PRs


@dataclass
class Progress:
    """How far the reconcile got; read by /metrics from another thread (whole ints only)."""

    running: bool = False
    listed: int = 0  # open PRs listed in this pass so far (or in the last one)
    checked: int = 0  # ... of them compared with the store
    admitted: int = 0  # ... of them queued now
    left: int = 0  # ... of them GitHub failed or refused: the next pass tries them again
    passes: int = 0  # passes completed since start
    completed_at: float = 0.0  # wall time the last pass completed (0: none yet)


class PassEnded(Exception):
    """The pass cannot go on (GitHub or the token failing PR after PR)."""


class Reconciler:
    def __init__(self, make: Callable[[Store], Handlers], store_path: Path, every_s: float,
                 stopping: threading.Event, retry_s: float = 5.0) -> None:
        self._make = make  # called on the reconcile's own thread: SQLite is per thread
        self.store_path, self.every_s, self.retry_s = store_path, every_s, retry_s
        self.stopping = stopping  # the dispatcher's: one stop() ends both
        self.progress = Progress()
        self.reconciled: list[str] = []  # one line per completed pass, newest last

    def run(self) -> None:
        wait, store, handlers = self.retry_s, None, None
        while not self.stopping.is_set():
            try:
                if handlers is None:
                    store = store or Store(self.store_path)
                    handlers = self._make(store)
                done = self.pass_once(handlers)
            except Exception as exc:  # the store's disk full, GitHub, a bug: never the thread
                if self.stopping.is_set():
                    break
                log.error("reconcile: pass ended (%s: %s); starting again in %.0f s",
                          type(exc).__name__, exc, wait, exc_info=not isinstance(
                              exc, (GitHubError, PassEnded)))
                done = False
                if store is not None:  # a failed COMMIT (disk full) leaves its transaction open
                    store.close()
                store = handlers = None
            finally:
                self.progress.running = False
            if done:
                wait = self.retry_s
            self.stopping.wait(self.every_s if done else wait)
            wait = self.retry_s if done else min(CAP_S, wait * 2)
        if store is not None:
            store.close()

    def pass_once(self, handlers: Handlers) -> bool:
        """One pass over every open PR; False when stopped before its end."""
        self.progress = Progress(running=True, passes=self.progress.passes,
                                 completed_at=self.progress.completed_at)
        failures, page = 0, 0
        while True:
            pulls = self._patient(lambda n=page: handlers.publisher.backoff.call(  # type: ignore[misc]
                lambda: handlers.port.open_pulls_page(n)))
            self.progress.listed += len(pulls)
            for pull in pulls:
                if self.stopping.is_set():
                    return False
                failures = self._one(handlers, pull, failures)
            if len(pulls) < PAGE:
                break
            page += 1
        p = self.progress
        p.passes, p.completed_at = p.passes + 1, time.time()
        line = f"{p.listed} open PR(s): {p.admitted} queued, {p.left} left for the next pass"
        log.info("reconcile: %s", line)
        self.reconciled.append(line)
        return True

    def _one(self, handlers: Handlers, pull: PullInfo, failures: int) -> int:
        """Reconcile one PR; returns the failures in a row so far."""
        try:
            line = self._patient(lambda: handlers.reconcile(pull))
        except GitHubError as exc:  # this PR only, or the start of a run of failures
            self.progress.left += 1
            log.warning("reconcile: #%s left for the next pass: %s", pull.number, exc)
            if failures + 1 >= FAILURES_IN_A_ROW:
                raise PassEnded(f"{failures + 1} PRs in a row failed, the last: {exc}") from exc
            return failures + 1
        self.progress.checked += 1
        if line.startswith("queued"):
            self.progress.admitted += 1
            log.info("reconcile: #%s: %s", pull.number, line)
        return 0

    def _patient(self, fn: Callable[[], T]) -> T:
        """fn, again after each rate limit GitHub answers (its wait, interruptibly)."""
        while True:
            try:
                return fn()
            except RateLimited as exc:
                log.warning("reconcile: GitHub rate limit; going on in %.0f s", exc.retry_after)
                if self.stopping.wait(exc.retry_after):
                    raise PassEnded("stopped during a rate-limit wait") from exc
