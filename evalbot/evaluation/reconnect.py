"""Calls to a box that survive a dropped connection: reconnect with backoff, then call again.

Only calls that are safe to repeat go through here (reads, idempotent copies, a start that first
looks for the run it may already have started); the run on the box itself never notices.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from evalbot.config.errors import PipelineError
from evalbot.remote.box import Box, BoxError, ConnectionLost

T = TypeVar("T")
BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0)  # then 15 s between attempts


@dataclass
class Connection:
    """One box's connection as the pipeline uses it; `events` records every drop and recovery."""

    box: Box
    name: str
    budget_s: float = 900.0  # how long a box may stay unreachable before the job is infra-error
    events: list[dict[str, Any]] = field(default_factory=list)
    sleep: Callable[[float], None] = time.sleep

    def call(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except ConnectionLost as exc:
            self._recover(exc)
        return self.call(fn)

    def _recover(self, first: ConnectionLost) -> None:
        """Reconnect with growing pauses until the box answers or the budget is spent."""
        dropped = time.monotonic()
        last: ConnectionLost = first
        attempt = 0
        while time.monotonic() - dropped < self.budget_s:
            self.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
            attempt += 1
            try:
                self.box.reconnect()
            except ConnectionLost as exc:
                last = exc
                continue
            except BoxError as exc:  # a refused host key or key: reconnecting cannot fix it
                self.events.append({"event": "refused", "error": str(exc)})
                raise PipelineError(str(exc)) from exc
            self.events.append({"event": "reconnected", "error": str(first),
                                "attempts": attempt,
                                "after_s": round(time.monotonic() - dropped, 3)})
            return
        self.events.append({"event": "gave-up", "error": str(last), "attempts": attempt})
        raise PipelineError(f"box {self.name}: connection lost and not back within "
                            f"{self.budget_s:.0f} s ({last})")

