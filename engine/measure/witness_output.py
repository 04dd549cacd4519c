"""A witness process's output as the harness reads it: its ids, main's near ties, the
near-tie counts a maintainer checks the credit by (engine/measure/witness.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from ..contract.witness_spec import WitnessSpec
from .witness_steps import main_ties, read_steps


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
