"""Does a head's claimed speed show up in the wall time the harness measured from outside?

An engine reports rates; the harness times each process. If the head claims to save work
(sum over its cells of tokens / rate) that its processes do not save in wall time, its numbers
are not its own: the verdict is `spoofed`. Base and head of one pair share everything else
(model load, start-up), so the difference of their wall times carries the real saving.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SHOWN_FRACTION = 0.5  # at least half of a claimed saving must be visible in the wall time
SIGMAS = 3.0  # ... unless the shortfall is within this many standard errors of the noise
MIN_SD_S = 0.0005  # a floor on the per-pair sd: identical wall times are not infinite certainty


@dataclass(frozen=True)
class Sample:
    pair: int
    side: str
    wall_s: float
    claimed_s: float  # sum over the run's cells of tokens / reported rate


def unexplained_saving(samples: Sequence[Sample]) -> str | None:
    """A reason when the head's claimed saving is not seen in its wall time, else None."""
    by_pair: dict[int, dict[str, Sample]] = {}
    for s in samples:
        by_pair.setdefault(s.pair, {})[s.side] = s
    full = [p for p in by_pair.values() if set(p) == {"base", "head"}]
    if len(full) < 3:
        return None
    claimed = np.array([p["base"].claimed_s - p["head"].claimed_s for p in full])
    wall = np.array([p["base"].wall_s - p["head"].wall_s for p in full])
    shortfall = claimed - wall
    sd = max(float(np.std(shortfall, ddof=1)), MIN_SD_S)
    c, w = float(np.mean(claimed)), float(np.mean(wall))
    significant = float(np.mean(shortfall)) > SIGMAS * sd / np.sqrt(len(full))
    if c > 0 and w < SHOWN_FRACTION * c and significant:
        return (f"head claims to save {1000 * c:.1f} ms of work per sample, but its processes "
                f"ran only {1000 * w:.1f} ms shorter than main's (timed by the harness)")
    return None
