"""The dispatcher: drains the webhook inbox on one thread.

One PR's fault delays only that PR. A delivery whose handling meets a GitHub error that may pass
(5xx, a dropped connection, the PR being written by a worker) is put back with an exponential
back-off (jittered, capped at five minutes) and the next due delivery is handled at once; the
store keeps one PR's deliveries in order behind its first (Store.inbox_next). What is not the
PR's but every delivery's holds the whole dispatcher back instead, the delivery kept and no
try counted: a rate limit (paused as GitHub asks), a 401 (the credentials refused) and the store
failing (locked, full, I/O), both held with a back-off (evalbot.github.hold). A GitHub refusal that
will not pass (403, 404, 409, 422) is logged and the delivery consumed; one that cannot be
handled (a payload the edge should have refused, a bug) or that kept failing for hours is set
aside with its error. docs/service.md, "Errors by class", has the whole table.

What GitHub did not deliver while the service was down is found by the reconcile, on its own
thread (evalbot.github.reconcile): a long one never holds a webhook back.

If the thread dies anyway, `alive()` turns false and the webhook answers 503 instead of 202.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from evalbot.config.errors import EvalbotError
from evalbot.github.events import parse_event
from evalbot.github.hold import Hold
from evalbot.github.port import RateLimited, Transient, Unauthorized
from evalbot.store.jobs import Store
from evalbot.store.schema import Error as StoreError
from evalbot.store.schema import passing_fault

if TYPE_CHECKING:
    from evalbot.github.handlers import Handlers

log = logging.getLogger("evalbot.github")
MAX_TRIES = 30  # about two hours of capped back-off, then a person should look at it
CAP_S = 300.0


class Dispatcher:
    def __init__(self, make: Callable[[Store], Handlers], store_path: Path,
                 wake: threading.Event, retry_s: float = 5.0,
                 pause: Callable[[float], object] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._make = make  # called on the dispatcher's own thread: SQLite is per thread
        self.store_path, self.wake, self.retry_s = store_path, wake, retry_s
        self.clock = clock
        self.stopping = threading.Event()
        self.pause = pause or self.stopping.wait  # for rate limits; interruptible by stop()
        self.done: list[str] = []  # one line per handled delivery, newest last
        self.dead: BaseException | None = None
        self.hold = Hold(retry_s, CAP_S, clock)  # after a 401 or a store fault

    def alive(self) -> bool:
        return self.dead is None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            self.dead = exc
            log.critical("dispatcher died (%s: %s): deliveries are refused with 503 until "
                         "the service is restarted", type(exc).__name__, exc)
            raise

    def _run(self) -> None:
        store = Store(self.store_path)
        store.inbox_restart()  # `due` is on this process's clock
        handlers = self._handlers(store)
        while handlers is not None and not self.stopping.is_set():
            if not self.turn(store, handlers):
                self.wake.wait(self._idle_wait(store))
                self.wake.clear()
        store.close()

    def turn(self, store: Store, handlers: Handlers) -> bool:
        """One delivery; False when there was nothing to do (or the dispatcher is held). The
        store failing holds it back, never ends it."""
        if not self.hold.open():
            return False
        try:
            return self.drain_once(store, handlers)
        except Exception as exc:  # the store itself failed (disk, lock, I/O): keep the thread
            if passing_fault(exc) is None:
                log.exception("dispatcher: the inbox could not be read")
            self._held(f"the store failed ({type(exc).__name__}: {exc})")
            return False

    def _held(self, why: str, level: int = logging.WARNING) -> None:
        wait = self.hold.fault()
        log.log(level, "dispatcher: %s; every delivery waits %.1f s (kept in the inbox)", why,
                wait)

    def _handlers(self, store: Store) -> Handlers | None:
        """Handlers need GitHub (the bot's login, when not pinned): wait for it, deliveries
        stay stored meanwhile."""
        wait = self.retry_s
        while not self.stopping.is_set():
            try:
                return self._make(store)
            except EvalbotError as exc:
                log.error("dispatcher: cannot start (%s); trying again in %.0f s", exc, wait)
            except Exception as exc:  # PyGithub's own errors while asking who we are
                log.error("dispatcher: cannot start (%s); trying again in %.0f s",
                          type(exc).__name__, wait)
            self.stopping.wait(wait)
            wait = min(CAP_S, wait * 2)
        return None

    def _idle_wait(self, store: Store) -> float:
        if not self.hold.open():
            return min(1.0, self.hold.left())
        try:
            due = store.inbox_next_due()
        except StoreError:  # the store failing: the next turn says so
            return 1.0
        return 1.0 if due is None else min(1.0, max(0.01, due - self.clock()))

    def drain_once(self, store: Store, handlers: Handlers) -> bool:
        item = store.inbox_next(self.clock())
        if item is None:
            return False
        delivery, name, body = item
        try:
            event = parse_event(name, json.loads(body))
        except (EvalbotError, ValueError, RecursionError) as exc:  # not JSON, nested too deep
            return self._set_aside(store, delivery, name, f"bad payload: {exc}")
        try:
            line = handlers.handle(event) if event is not None else "ignored"
        except RateLimited as exc:  # the token's limit: every other delivery would meet it
            log.warning("delivery %s: GitHub rate limit; no request for %.0f s (%s)", delivery,
                        exc.retry_after, exc)
            self.pause(exc.retry_after)
            return True
        except Unauthorized as exc:  # the token's: every delivery would meet it; a person may
            self._held(f"delivery {delivery}: {exc}", logging.ERROR)  # have to renew a key
            return True
        except Transient as exc:
            return self._defer(store, delivery, name, str(exc))
        except EvalbotError as exc:
            log.warning("delivery %s (%s): failed: %s", delivery, name, exc)
            line = f"failed: {exc}"
        except StoreError as exc:
            if passing_fault(exc) is None:  # not one that passes: damage or a bug
                return self._set_aside(store, delivery, name, f"{type(exc).__name__}: {exc}")
            self._held(f"delivery {delivery}: the store failed ({exc})")
            return True
        except Exception as exc:  # a bug must not stop every later delivery
            log.exception("delivery %s (%s): handler failed", delivery, name)
            return self._set_aside(store, delivery, name, f"{type(exc).__name__}: {exc}")
        log.info("delivery %s (%s): %s", delivery, name, line)
        store.inbox_done(delivery)  # first: `done` lists only deliveries the store has let go
        self.done.append(f"{delivery}: {line}")
        self.hold.clear()
        return True

    def _defer(self, store: Store, delivery: str, name: str, error: str) -> bool:
        wait = store.inbox_defer(delivery, self.clock(), error, self.retry_s, CAP_S)
        tries = store.inbox_tries(delivery)
        if tries >= MAX_TRIES:
            return self._set_aside(store, delivery, name, f"gave up after {tries} tries: {error}")
        log.warning("delivery %s (%s): GitHub unavailable (%s); try %d again in %.1f s, the "
                    "other PRs' deliveries go on", delivery, name, error, tries, wait)
        return True

    def _set_aside(self, store: Store, delivery: str, name: str, error: str) -> bool:
        log.error("delivery %s (%s) set aside: %s", delivery, name, error)
        store.inbox_set_aside(delivery, error[:500])
        self.done.append(f"{delivery}: set aside: {error[:500]}")
        return True
