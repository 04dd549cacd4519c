"""A witness process's output as the harness reads it (engine/measure/witness.py): its ids, a
stepped witness's STEP lines, main's near ties, the agreement of a head's ids with main's, and the
near-tie counts a maintainer checks the credit by (docs/trust.md, "Near ties"): each STEP line is
`<id>` or `<id> <runner_up> <margin>`, and a head's id agrees where it is main's, or main's
runner-up where main's own margin was a near tie. Only main's fields are ever read."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from ..contract.witness_spec import STEP, WitnessSpec


class Output(Protocol):
    """What `read` needs of a timed process (engine/measure/witness.py `Timed`)."""

    @property
    def ok(self) -> bool: ...
    @property
    def output(self) -> str: ...
    @property
    def error(self) -> str: ...


def read(spec: WitnessSpec, timed: Output) -> tuple[list[int], list[int | None], str]:
    """A process's output ids, main's near ties read from the same output (`main_ties`; only
    the base side's are ever used), and "" or why the output cannot be judged."""
    if not timed.ok:
        return [], [], timed.error or "failed"
    try:
        if spec.output["kind"] == "step_lines":
            steps = read_steps(timed.output)
            ids, ties = [s.id for s in steps], main_ties(steps, spec.tie_margin)
        else:
            ids, ties = read_output_ids(timed.output, spec.output), []
    except (ValueError, KeyError, TypeError) as exc:
        return [], [], f"unreadable output: {str(exc)[:200]}"
    if len(ids) != spec.output_tokens:
        return [], [], f"{len(ids)} output ids, expected {spec.output_tokens}"
    return ids, ties, ""


def read_output_ids(output: str, how: dict[str, Any]) -> list[int]:
    """The ids a witness printed: one STEP line per step, one prefixed line of ids, a list
    inside a prefixed JSON line, or the argmax column of `S` score lines."""
    kind, prefix = how["kind"], str(how.get("prefix", ""))
    if kind == "step_lines":
        return [s.id for s in read_steps(output)]
    if kind == "score_lines":
        return [int(ln.split(" am=")[1].split()[0]) for ln in output.splitlines()
                if ln.startswith("S i=")]
    lines = [ln[len(prefix):] for ln in output.splitlines() if ln.startswith(prefix)]
    if len(lines) != 1:
        raise ValueError(f"expected one line starting {prefix.strip()!r}, found {len(lines)}")
    if kind == "ids_line":
        return [int(t) for t in lines[0].replace(",", " ").split()]
    doc: Any = json.loads(lines[0])
    for part in str(how["path"]).split("."):
        doc = doc[part]
    return [int(t) for t in doc]


def tie_counts(spec: WitnessSpec, side: str, ties: Sequence[int | None],
                credited: int) -> dict[str, int]:
    """What a maintainer checks the near-tie credit by (docs/trust.md): main's near-tie steps
    on its sample, the head's ids credited as near ties on the head's. Stepped witnesses only."""
    if spec.output["kind"] != "step_lines":
        return {}
    if side == "base":
        return {"near_ties": sum(t is not None for t in ties)}
    return {"tie_credited": credited}


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


def agreement(got: list[int], base: list[int], n: int,
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
