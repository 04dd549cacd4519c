"""Witness workloads: work the harness times itself, so a printed rate can be checked.

A witness is a process whose cost is dominated by some cells' work (a long decode, a prefill at
the cell's context), fed a prompt the harness draws fresh for every pair (the PR cannot have
computed its answer before), timed by the harness from process start to exit, and accepted only
when its output ids agree with main's for the same prompt (the work was done). Pairs alternate
as the samples do (ABBA). The harness only records; the bot judges the record
(evalbot/grading/confirmation.py), so re-grading recomputes the check.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.contract.witness_spec import WitnessSpec


@dataclass
class WitnessRecord:
    """What the results file keeps of one witness: its spec and every timed process."""

    spec: WitnessSpec
    samples: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        s = asdict(self.spec)
        return {"name": s["name"], "cells": s["cells"], "pairs": s["pairs"],
                "looks": list(s["looks"]), "clock": s["clock"],
                "min_agreement": s["min_agreement"], "output_tokens": s["output_tokens"],
                "source": "witness", "samples": self.samples}


@dataclass(frozen=True)
class Timed:
    """One witness process as the harness saw it."""

    ok: bool  # exited 0 within its time
    output: str
    seconds: float  # by the spec's clock
    throttled: bool
    error: str = ""


Launch = Callable[[str, list[str], float], Timed]  # (side, argv, timeout_s) -> Timed


def measure(spec: WitnessSpec, fill: Callable[[str, str], str], launch: Launch,
            prompts: Path, warmup: int = 1) -> WitnessRecord:
    """Warm-up, then kept pairs in ABBA order, each pair on a fresh prompt, up to the first look
    that settles (see `WitnessSpec.looks`) or the last."""
    record = WitnessRecord(spec)
    for _ in range(warmup):
        for side in ("base", "head"):
            launch(side, _argv(spec, fill, side, _prompt(spec, prompts), prompts), spec.timeout_s)
    pair, attempts = 0, 0
    while pair < spec.pairs and attempts < 2 * spec.pairs:
        attempts += 1
        prompt = _prompt(spec, prompts)
        order = ("base", "head") if pair % 2 == 0 else ("head", "base")
        timed = {side: launch(side, _argv(spec, fill, side, prompt, prompts), spec.timeout_s)
                 for side in order}
        dropped = any(t.throttled for t in timed.values())
        ids = {side: _ids(spec, t) for side, t in timed.items()}
        for side in order:
            t, (got, error) = timed[side], ids[side]
            agree = _agreement(got, ids["base"][0], spec.output_tokens)
            record.samples.append({
                "pair": pair, "side": side, "seconds": round(t.seconds, 4), "dropped": dropped,
                "verified": bool(got) and error == "" and agree >= spec.min_agreement,
                "agreement": round(agree, 4), "error": error})
        if not dropped:
            pair += 1
            if settled(spec, record, pair):
                break
    return record


def settled(spec: WitnessSpec, record: WitnessRecord, pairs: int) -> bool:
    """At a look before the last: the verified pairs' saving is above 0 at the look's stop_t."""
    if not spec.stop_t or pairs not in spec.looks[:-1]:
        return False
    by_pair: dict[int, dict[str, dict[str, Any]]] = {}
    for s in record.samples:
        if not s["dropped"] and s["verified"]:
            by_pair.setdefault(s["pair"], {})[s["side"]] = s
    d = [p["base"]["seconds"] - p["head"]["seconds"] for p in by_pair.values() if len(p) == 2]
    if len(d) < 3:
        return False
    mean = sum(d) / len(d)
    sd = (sum((x - mean) ** 2 for x in d) / (len(d) - 1)) ** 0.5
    return mean - spec.stop_t[spec.looks.index(pairs)] * sd / len(d) ** 0.5 > 0


def _prompt(spec: WitnessSpec, prompts: Path) -> list[int]:
    """Fresh ids from the OS's random source, written where the sandbox may read them."""
    ids = [secrets.randbelow(spec.id_range) for _ in range(spec.prompt_tokens)]
    prompts.mkdir(parents=True, exist_ok=True)
    prompts.chmod(0o755)
    for name, text in (("prompt.txt", " ".join(map(str, ids)) + "\n"),
                       ("prompt.json", json.dumps(ids))):
        (prompts / name).write_text(text)
        (prompts / name).chmod(0o644)
    return ids


def _argv(spec: WitnessSpec, fill: Callable[[str, str], str], side: str,
          prompt: list[int], prompts: Path) -> list[str]:
    """The run's placeholders by `fill`; the prompt's here (paths the harness chose)."""
    out: list[str] = []
    for arg in spec.argv:
        if arg == "{prompt_ids}":
            out.extend(str(i) for i in prompt)
            continue
        arg = arg.replace("{prompt}", str(prompts / "prompt.txt"))
        out.append(fill(arg.replace("{prompt_json}", str(prompts / "prompt.json")), side))
    return out


def _ids(spec: WitnessSpec, timed: Timed) -> tuple[list[int], str]:
    if not timed.ok:
        return [], timed.error or "failed"
    try:
        ids = read_output_ids(timed.output, spec.output)
    except (ValueError, KeyError, TypeError) as exc:
        return [], f"unreadable output: {str(exc)[:200]}"
    if len(ids) != spec.output_tokens:
        return [], f"{len(ids)} output ids, expected {spec.output_tokens}"
    return ids, ""


def read_output_ids(output: str, how: dict[str, Any]) -> list[int]:
    """The ids a witness printed: one prefixed line of ids, a list inside a prefixed JSON line,
    or the argmax column of `S` score lines."""
    kind, prefix = how["kind"], str(how.get("prefix", ""))
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


def _agreement(got: list[int], base: list[int], n: int) -> float:
    """Share of the n positions where both sides printed the same id (0 when either is empty)."""
    if not got or not base:
        return 0.0
    return sum(a == b for a, b in zip(got, base, strict=False)) / n
