"""A stepped witness's output lines and the agreement of a head's ids with main's
(docs/trust.md, "Near ties"): each STEP line is `<id>` or `<id> <runner_up> <margin>`, and a
head's id agrees where it is main's, or main's runner-up where main's own margin was a near tie.
Only main's fields are ever read."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from ..contract.witness_spec import STEP


class Step(NamedTuple):
    """One STEP line: the id, and where the tool printed them, that step's runner-up id and its
    top-1 minus top-2 logit margin (read only from main's output: `main_ties`)."""

    id: int
    runner_up: int | None = None
    margin: float | None = None


def read_steps(output: str) -> list[Step]:
    """A stepped witness's STEP lines, each `<id>` or `<id> <runner_up> <margin>`."""
    steps, skip = [], len(STEP)
    for line in output.splitlines():
        if not line.startswith(STEP):
            continue
        words = line[skip:].split()
        if len(words) == 1:
            steps.append(Step(int(words[0]), None, None))
            continue
        if len(words) != 3:
            raise ValueError(f"a step line is '<id>' or '<id> <runner_up> <margin>', "
                             f"not {line[skip:].strip()[:60]!r}")
        margin = float(words[2])
        if not margin >= 0 or math.isinf(margin):  # NaN fails it too
            raise ValueError(f"step margin {words[2]!r} is not a logit margin >= 0")
        steps.append(Step(int(words[0]), int(words[1]), margin))
    return steps


def main_ties(steps: Sequence[Step], tie_margin: float) -> list[int | None]:
    """Per step of main's output, its runner-up id where its top two logits were closer than
    `tie_margin` (a near tie: bf16-level noise may flip that argmax), else None."""
    return [s.runner_up if s.margin is not None and s.margin < tie_margin else None
            for s in steps]


def _agreement(got: list[int], base: list[int], n: int,
               ties: Sequence[int | None] = ()) -> tuple[float, int]:
    """Share of the n positions where the head's id agrees with main's (0 when either side is
    empty), and how many of them agree only as near ties. A head's id agrees where it is main's,
    or main's runner-up at a step where main itself was near a tie (`main_ties`): numeric noise
    flips only near-tied logits. Whatever else the head printed plays no part."""
    if not got or not base:
        return 0.0, 0
    same = sum(a == b for a, b in zip(got, base, strict=False))
    tied = sum(a != b and a == t for a, b, t in zip(got, base, ties, strict=False))
    return (same + tied) / n, tied
