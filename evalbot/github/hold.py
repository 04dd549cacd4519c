"""Holding a loop back after a fault that is not one item's but everyone's.

GitHub refusing the credentials (401) and the store failing (locked, full, I/O) would meet every
delivery and every job alike: instead of spending each one's tries on it, the dispatcher (or a
worker's publication sweep) stops for a while, leaves its work where it is, and looks again after
an exponential back-off (jittered, capped). The first success opens it again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Hold:
    first_s: float = 5.0
    cap_s: float = 300.0
    clock: Callable[[], float] = time.monotonic
    faults: int = 0  # in a row, since the last success
    until: float = 0.0  # on `clock`: nothing is tried before

    def open(self) -> bool:
        return self.clock() >= self.until

    def left(self) -> float:
        return max(0.0, self.until - self.clock())

    def fault(self) -> float:
        """Hold back after one more fault in a row; returns the wait."""
        self.faults += 1
        wait = min(self.cap_s, self.first_s * 2 ** (self.faults - 1)) * random.uniform(0.5, 1.0)
        self.until = self.clock() + wait
        return wait

    def clear(self) -> None:
        self.faults, self.until = 0, 0.0
