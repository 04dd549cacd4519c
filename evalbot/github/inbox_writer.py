"""Group commit for the webhook inbox: the deliveries that arrive while one commit is on its way
to disk share the next one.

A 202 promises that the delivery is on disk: the store commits with SQLite's default
synchronous=FULL, an fsync of the WAL per commit, and the answer waits for it. That fsync (7 ms
on the measuring machine, tens under load) was most of an answer's time, once per delivery, and
the webhook's threads queued behind each other's (bench/intake.py --rate). One writer thread now
takes every delivery waiting and stores them in one transaction: one fsync for all, each still
answered only after it. A batch that fails is stored again one delivery at a time, so a delivery
the store refuses fails alone. The thread ends after IDLE_S without deliveries, closing its
connection, and the next delivery starts it again.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path

from evalbot.store.jobs import Store

MAX_BATCH = 256
IDLE_S = 5.0


@dataclass
class _Delivery:
    delivery: str
    event: str
    body: bytes
    subject: str | None
    done: threading.Event = field(default_factory=threading.Event)
    new: bool = False
    error: BaseException | None = None


class InboxWriter:
    def __init__(self, store_path: Path) -> None:
        self.store_path = store_path
        self._queue: queue.SimpleQueue[_Delivery] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running = False

    def put(self, delivery: str, event: str, body: bytes, subject: str | None) -> bool:
        """Store a verified delivery (Store.inbox_put); False for a redelivery. Returns once it
        is committed, or raises what the store raised."""
        item = _Delivery(delivery, event, body, subject)
        with self._lock:  # the writer decides to end under this lock: no delivery is stranded
            self._queue.put(item)
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, daemon=True, name="inbox-writer").start()
        item.done.wait()
        if item.error is not None:
            raise item.error
        return item.new

    def _run(self) -> None:
        store: Store | None = None
        batch: list[_Delivery] = []
        try:
            while True:
                batch = self._next_batch()
                if not batch:
                    return
                store = store or _open(self.store_path)
                self._store(store, batch)
        except BaseException as exc:  # the store cannot be opened: every waiter hears why
            with self._lock:
                self._running = False
                for d in batch:
                    d.error = exc
                self._fail_all(exc)
            for d in batch:
                d.done.set()
        finally:
            if store is not None:
                store.close()

    def _next_batch(self) -> list[_Delivery]:
        try:
            batch = [self._queue.get(timeout=IDLE_S)]
        except queue.Empty:
            with self._lock:
                if self._queue.empty():
                    self._running = False
                    return []
            batch = []
        while len(batch) < MAX_BATCH:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    @staticmethod
    def _store(store: Store, batch: list[_Delivery]) -> None:
        try:
            news = store.inbox_put_many([(d.delivery, d.event, d.body, d.subject) for d in batch])
            for d, new in zip(batch, news, strict=True):
                d.new = new
        except Exception:
            _rollback(store)
            for d in batch:  # one at a time: only the delivery the store refuses fails
                try:
                    d.new = store.inbox_put(d.delivery, d.event, d.body, d.subject)
                except Exception as exc:
                    _rollback(store)
                    d.error = exc
        for d in batch:
            d.done.set()

    def _fail_all(self, exc: BaseException) -> None:
        while not self._queue.empty():
            d = self._queue.get_nowait()
            d.error = exc
            d.done.set()


def _open(path: Path) -> Store:
    store = Store(path)
    # Never checkpoint here: an automatic checkpoint runs in the connection whose commit crossed
    # the threshold, copying the WAL and syncing the database file while every delivery waiting
    # behind it waits too (stalls of ~1 s on a busy disk). The dispatcher's commits checkpoint.
    store.never_checkpoint()
    return store


def _rollback(store: Store) -> None:
    """A COMMIT that failed (a full disk) leaves its transaction open: end it."""
    store.end_failed_commit()
