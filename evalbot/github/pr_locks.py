"""One lock per PR, shared by the threads that act on a repository's PRs.

The dispatcher handles a PR's webhook deliveries in order; the reconcile (evalbot.github.reconcile),
on its own thread, admits the open PRs the store does not know. Both read the PR's jobs, queue,
supersede and write its sticky comment: a PR is acted on by one of them at a time, while every
other PR goes on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class PrLocks:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[int, threading.Lock] = {}

    @contextmanager
    def hold(self, number: int) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(number, threading.Lock())
        with lock:
            yield
