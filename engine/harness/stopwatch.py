"""Box time per stage of one job: the results' `timing` (docs/contracts.md).

Every moment from the start is charged to exactly one stage: the innermost one running, or
`rest` when none is (set-up, tokenizing, sealing the trees, writing status). A stage entered
inside another pauses it (the warm-ups inside the measuring), so the stages add up to the total
by construction, whatever fails on the way: a stage is charged when it is left, raising or not.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..contract.results import TIMING_STAGES


class Stopwatch:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start = self._mark = clock()
        self._running = ["rest"]
        self._seconds = dict.fromkeys(TIMING_STAGES, 0.0)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if name not in self._seconds:
            raise ValueError(f"{name!r} is not a stage of the results ({', '.join(TIMING_STAGES)})")
        self._charge()
        self._running.append(name)
        try:
            yield
        finally:
            self._charge()
            self._running.pop()

    def timing(self) -> dict[str, Any]:
        """The results' `timing`: the seconds so far, in total and per stage."""
        self._charge()
        return {"total_s": round(self._mark - self._start, 3),
                "stages": {name: round(s, 3) for name, s in self._seconds.items()}}

    def _charge(self) -> None:
        now = self._clock()
        self._seconds[self._running[-1]] += now - self._mark
        self._mark = now
