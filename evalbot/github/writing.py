"""One writer per PR on GitHub at a time: across processes the store's claim (evalbot.store.claims)
as its users take it; within the service one thread at a time (`PrLocks`).

The dispatcher takes it around everything one delivery does to a PR (admission, commands) and
the reconcile around each PR it admits; a worker takes it around a verdict's publication. Without
it, a verdict checked as the PR's latest could be written after a force-push admitted a newer
head, over that head's pending comment, label and status. In one process the dispatcher handles
a PR's deliveries in order while the reconcile (evalbot.github.reconcile), on its own thread,
admits the open PRs the store does not know: both read the PR's jobs, queue, supersede and write
its sticky comment, so they share one lock per PR, and every other PR goes on.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from evalbot.github.port import Transient
from evalbot.store.jobs import Store


class Busy(Transient):
    """Another writer holds the PR right now (a worker publishing a verdict): try again later,
    as after a 5xx."""


def dispatcher() -> str:
    """The dispatcher's name as a claim's owner (asked each time: a forked child is not it)."""
    return f"dispatcher-{os.getpid()}"


def subject(repo: str, number: int) -> str:
    return f"{repo}#{number}"  # the inbox's subject for the PR's deliveries too


@contextmanager
def writing(store: Store, repo: str, number: int, owner: str) -> Iterator[None]:
    """Hold the PR's claim for the block; Busy when another writer holds it."""
    what = subject(repo, number)
    if not store.claim(what, owner):
        raise Busy(f"#{number} is being written by {store.claimant(what)}")
    try:
        yield
    finally:
        store.unclaim(what, owner)


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
