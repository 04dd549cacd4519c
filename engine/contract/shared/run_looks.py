"""The looks of one run's cells, pair by pair: what the harness does after each pair it measures,
and what the grader replays from the recorded samples (engine/contract/shared/replay.py).

After each pair: the pairs the GPU state flagged (throttled) are out; the fault screen
(engine/contract/shared/faults.py, rule version 3) runs again over all the others, so a pair can be found
faulted later, once its side has shown what a clean sample looks like; the kept pairs are the
rest, in measured order. The next look fires once the run has kept as many pairs as it counts,
and judges the first that many kept pairs of every cell not yet decided, the run's cells testing
their calibration together (`stats.refuted_per_look`). A look of fewer pairs than a verdict needs
can only say neutral or measure on; when the screen later drops a pair it judged, it judged
faults, and it is taken again once enough kept pairs are there (its error is only the
equivalence test's: it can give no verdict). A look that could give a verdict is never taken
again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from . import faults, stats


@dataclass(frozen=True)
class RunCell:
    key: str
    higher_is_better: bool
    floor: float  # the calibrated sd of its per-pair log-ratio
    edges: tuple[float, ...] | None = None  # its tier thresholds (log-ratio); None: no tier test


@dataclass
class RunLooks:
    cells: Sequence[RunCell]
    schedule: Sequence[stats.Bounds]
    significance: float
    tolerance: float
    sigmas: float = 0.0  # the rule's fault_sigmas: 0, no screen
    values: list[dict[str, tuple[float, float]]] = field(default_factory=list)  # per pair
    throttled: list[bool] = field(default_factory=list)
    faulted: set[int] = field(default_factory=set)  # pairs the screen drops now
    faulty: bool = False  # a sample of the run is faulted now, dropped or not
    looks: dict[str, list[stats.Look]] = field(default_factory=dict)
    step: int = 0  # the next look
    judged: tuple[int, ...] = ()  # the pairs the last neutral-only look judged

    def add(self, values: dict[str, tuple[float, float]], throttled: bool) -> bool:
        """One more pair, (base, head) per cell key; True when a look fired."""
        self.values.append(values)
        self.throttled.append(throttled)
        self.faulted = self._screen()
        if self.judged and self.faulted.intersection(self.judged):
            self.step, self.judged = self._neutral_only_before(self.step), ()
        fired = False
        while not self.done and len(self.kept) >= self.schedule[self.step].pairs and \
                self._may_look(self.schedule[self.step]):
            self._look(self.schedule[self.step])
            fired = True
        return fired

    def _may_look(self, bounds: stats.Bounds) -> bool:
        """A look that may give a verdict waits for faults.FAULTED_VERDICT_PAIRS pairs measured
        once a sample of the run is faulted."""
        return bounds.directional_floor < 0 or not self.faulty or \
            len(self.values) >= faults.FAULTED_VERDICT_PAIRS

    @property
    def kept(self) -> list[int]:
        return [i for i, t in enumerate(self.throttled) if not t and i not in self.faulted]

    @property
    def dropped(self) -> list[int]:
        return [i for i, t in enumerate(self.throttled) if t or i in self.faulted]

    def decided(self, key: str) -> bool:
        own = self.looks.get(key) or []
        return bool(own) and own[-1].decision in stats.FINAL

    @property
    def done(self) -> bool:
        """The last look was taken, or every cell is decided."""
        return self.step >= len(self.schedule) or all(self.decided(c.key) for c in self.cells)

    def _screen(self) -> set[int]:
        measured = [i for i, t in enumerate(self.throttled) if not t]
        if self.sigmas <= 0 or not measured:
            return set()
        x = np.array([[faults.oriented([self.values[i][c.key][side] for i in measured],
                                       c.higher_is_better) for side in (0, 1)]
                      for c in self.cells])  # (cells, 2, pairs)
        floors = np.array([c.floor for c in self.cells])
        drop, faulty = faults.screened_pairs(x, floors, self.sigmas)
        self.faulty = bool(faulty)
        return {i for i, bad in zip(measured, drop, strict=True) if bad}

    def _look(self, bounds: stats.Bounds) -> None:
        use = self.kept[: bounds.pairs]
        ratios = [stats.log_ratios([self.values[i][c.key][0] for i in use],
                                   [self.values[i][c.key][1] for i in use], c.higher_is_better)
                  for c in self.cells]
        # every cell of the run, decided or not, tests the calibration (engine/contract/shared/stats.py)
        (refuted,) = stats.refuted_per_look(ratios, [c.floor for c in self.cells], [bounds])
        for cell, r in zip(self.cells, ratios, strict=True):
            if not self.decided(cell.key):
                self.looks.setdefault(cell.key, []).append(stats.look(
                    r, bounds, cell.floor, self.significance, self.tolerance,
                    list(cell.edges) if cell.edges else None, refuted))
        if bounds.directional_floor < 0:  # neutral only: void if the screen drops its pairs
            self.judged = tuple(use)
        self.step += 1

    def _neutral_only_before(self, step: int) -> int:
        return max((k for k, b in enumerate(self.schedule[:step]) if b.directional_floor < 0),
                   default=0)
