"""Witness workloads: work the harness times itself, so a printed rate can be checked.

A witness is a process whose cost is dominated by some cells' work (a long decode, a prefill at
the cell's context), fed ids the harness draws fresh for every pair (the PR cannot have computed
its answer before), timed by the harness, and accepted only when its output ids agree with
main's for the same ids (the work was done; main's runner-up at main's own near tie agrees too:
`main_ties`). The protocol (engine/contract/witness_spec.py): the prompt after READY, then a
stepped witness's decode ids one at a time, each after the previous step's output was read; only
that span is timed. Pairs alternate as the samples do (ABBA). The harness only records; the bot
judges the record (evalbot/grading/confirmation.py), so re-grading recomputes the check.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..contract.shared.witness_interval import (
    FLOOR_STALE,
    MIN_PAIRS,
    SHOWN_FRACTION,
    Critical,
    Floor,
    others_claims,
    pair_savings,
    rules_out,
    saving_interval,
    unverified_work_s,
)
from ..contract.witness_spec import READY, STEP, WitnessSpec
from ..sandbox import proc
from .witness_output import agreement, read, tie_counts

HANDOFF_PROMPT_CAP = 1 << 20  # bytes: Linux's unprivileged pipe maximum (proc._hold grows it)


@dataclass
class WitnessRecord:
    """What the results file keeps of one witness: its spec and every timed process."""

    spec: WitnessSpec
    samples: list[dict[str, Any]] = field(default_factory=list)
    # "settled" (at a look), "box_time" (`fits`), "not_needed" (not run: another witness
    # settled the verdict, engine/measure/witness_plan.py), FLOOR_STALE (not run: its floor is
    # refuted on the box), "": every pair it could
    stopped: str = ""
    room: Room | None = None  # the box time it was given (`fits`); None: unbounded
    settled_by: str = ""  # why: confirmed, contradicted, failed, unresolvable; slower, timed

    def to_dict(self) -> dict[str, Any]:
        s = asdict(self.spec)
        return {"name": s["name"], "cells": s["cells"], "pairs": s["pairs"],
                "looks": list(s["looks"]), "clock": s["clock"],
                "min_agreement": s["min_agreement"], "tie_margin": s["tie_margin"],
                "output_tokens": s["output_tokens"],
                "sd_floor_s": s["sd_floor_s"], "floor_df": s["floor_df"],
                "rule_version": s["rule_version"],
                "steps": s["steps"], "source": "witness", "stopped": self.stopped,
                **({"settled_by": self.settled_by} if self.settled_by else {}),
                **({} if self.room is None else self.room.to_dict()),
                "samples": self.samples}


@dataclass(frozen=True)
class Room:
    """The box time a witness may take: up to its first look, what is left of the PR's budget
    (an honest witness always reaches the look it can first confirm at); beyond it, what is
    left of the witnesses' share of the measuring's box time."""

    first_look: int
    budget_s: float
    share_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"first_look": self.first_look, "budget_s": round(self.budget_s, 3),
                "allowance_s": round(self.share_s, 3)}


@dataclass(frozen=True)
class Timed:
    """One witness process as the harness saw it."""

    ok: bool  # exited 0 within its time
    output: str
    seconds: float  # by the spec's clock
    throttled: bool
    error: str = ""
    wall_s: float | None = None  # start to exit, the box time it took (None: not known)


# (side, argv, timeout_s, prompt ids) -> Timed; the ids are for a handoff clock's stdin
Launch = Callable[[str, list[str], float, list[int]], Timed]


def measure(spec: WitnessSpec, fill: Callable[[str, str], str], launch: Launch,
            prompts: Path, warmup: int = 1, stop: Stop | None = None,
            room: Room | None = None) -> WitnessRecord:
    """Warm-up, then kept pairs in ABBA order, each pair on fresh ids, up to the first look
    that settles (see `settled`), the last, or the pair that would not fit in its `room` of box
    time (see `fits`)."""
    if spec.floor_stale:  # it could confirm nothing: no box time for it (docs/statistics.md)
        return WitnessRecord(spec, stopped=FLOOR_STALE)
    record = WitnessRecord(spec, room=room)
    for _ in range(warmup):
        for side in ("base", "head"):
            warm = _prompt(spec, prompts)
            launch(side, _argv(spec, fill, side, warm, prompts), spec.timeout_s, warm)
    pair, attempts = 0, 0
    while pair < spec.pairs and attempts < 2 * spec.pairs:
        if room is not None and not fits(record.samples, pair, room):
            record.stopped = "box_time"
            break
        attempts += 1
        prompt = _prompt(spec, prompts)
        order = ("base", "head") if pair % 2 == 0 else ("head", "base")
        timed = {side: launch(side, _argv(spec, fill, side, prompt, prompts), spec.timeout_s,
                              prompt) for side in order}
        dropped = any(t.throttled for t in timed.values())
        outputs = {side: read(spec, t) for side, t in timed.items()}
        main = outputs["base"]
        for side in order:
            t, (got, _, error) = timed[side], outputs[side]
            agree, credited = agreement(got, main[0], spec.output_tokens, main[1])
            record.samples.append({
                "pair": pair, "side": side, "seconds": round(t.seconds, 4), "dropped": dropped,
                "verified": bool(got) and error == "" and agree >= spec.min_agreement,
                "agreement": round(agree, 4), "error": error,
                **tie_counts(spec, side, main[1], credited),
                **({} if t.wall_s is None else {"wall_s": round(t.wall_s, 4)})})
        if not dropped:
            pair += 1
            record.settled_by = settled(spec, record, pair, stop or Stop())
            if record.settled_by:
                record.stopped = "settled"
                break
    return record


def fits(samples: Sequence[Mapping[str, Any]], kept: int, room: Room) -> bool:
    """May the witness start another pair? The next pair is taken to cost what the last one did
    (each process's `wall_s`, start to exit). Before its first look it may take what is left
    of the PR's budget, but only if that reaches the first look (the bot could not judge fewer
    pairs); after it, a pair must fit in the share. The first pair always starts while any
    budget is left: nothing tells its cost before."""
    if not samples:
        return room.budget_s > 0
    spent, pair_s = box_s(samples), box_s(samples[-2:])
    if kept < room.first_look:
        return spent + (room.first_look - kept) * pair_s <= room.budget_s
    return spent + pair_s <= min(room.share_s, room.budget_s)


def box_s(samples: Sequence[Mapping[str, Any]]) -> float:
    """The box time these witness processes took: each one's `wall_s`, start to exit, whatever
    the witness's clock (0 for a process that could not start)."""
    return sum(float(s.get("wall_s") or 0.0) for s in samples)


@dataclass(frozen=True)
class Stop:
    """What the printed rates claim of a witness (`claimed_saving`): the bot confirms a cell when
    the lower bound clears `margin_s` (`stop_margin`) plus the work the head's invented ids may
    have skipped (`unverified_work_s`), and contradicts when the upper bound is below
    SHOWN_FRACTION of `claimed_s`."""

    margin_s: float = 0.0
    claimed_s: float = 0.0
    negative_s: float = 0.0  # the claims (<= 0) of cells printed slower: less saving expected
    # only unchanged cells (`witness_every_cell`, issue 53): `timed` once the equivalence bound
    # rules out their slowdowns, `slower` once the upper bound says it never will
    unchanged_only: bool = False
    # the unchanged cells it times are believed once the equivalence bound is above this, plus
    # the work invented ids may have skipped (`believed_above`); None: none to rule out
    believe_above_s: float | None = None


def stop_for(claims: Mapping[str, tuple[float, float]], improved: Iterable[str]) -> Stop:
    return Stop(stop_margin(claims, improved), sum(max(c[0], 0.0) for c in claims.values()),
                sum(min(c[0], 0.0) for c in claims.values()))


def settled(spec: WitnessSpec, record: WitnessRecord, pairs: int, stop: Stop) -> str:
    """At a look before the last, what the bot would decide on these pairs is decided, and
    why: the claim `confirmed` at the look's stop_t, `contradicted` at its spoof_t, a head
    output that `failed` verification (after any pair: the witness can no longer confirm, and
    a head that times out its witness would cost a timeout a pair until the look), or a head that
    invents ids whose claim, less what they may have skipped, the last look could not confirm
    even were every printed rate true (`unresolvable`). "": measure on."""
    if not spec.stop_t:
        return ""
    samples = record.samples
    if any(not s["verified"] and not s["dropped"] for s in samples if s["side"] == "head"):
        return "failed"  # after any pair, not only at a look: it can never confirm again
    if pairs not in spec.looks[:-1]:
        return ""
    d = pair_savings(samples, need_verified=True)
    if len(d) < MIN_PAIRS:
        return ""
    skipped = unverified_work_s(samples)
    if skipped > 0 and unresolvable(spec, d, stop.claimed_s - stop.margin_s - skipped):
        return "unresolvable"
    base_s = float(np.mean([s["seconds"] for s in samples if s["side"] == "base"]))
    bounds = saving_interval(d, base_s, look_critical(spec, spec.looks.index(pairs)),
                             Floor(spec.sd_floor_s, spec.floor_df))
    # contradiction first, as the bot judges: a saving far below the claim is no confirmation
    if stop.claimed_s > 0 and bounds.hi < SHOWN_FRACTION * stop.claimed_s + stop.negative_s:
        return "contradicted"
    above = None if stop.believe_above_s is None else stop.believe_above_s + skipped
    ruled_out = above is not None and len(d) == pairs and rules_out(
        d, base_s, equivalence_critical(spec, pairs), Floor(spec.sd_floor_s, spec.floor_df), above)
    if stop.unchanged_only:  # futility: at the contradiction's level, it can never rule it out
        return "timed" if ruled_out else "slower" if above is not None and bounds.hi < above else ""
    if bounds.lo > stop.margin_s + skipped and (ruled_out or stop.believe_above_s is None):
        return "confirmed"
    return ""


def equivalence_critical(spec: WitnessSpec, pairs: int) -> Critical:
    """The equivalence bound's critical values at the look of `pairs` pairs, as the bot set them
    (`equivalence_t`: none rules nothing out)."""
    if pairs not in spec.looks or not spec.equivalence_t:
        return Critical(math.inf)
    k = spec.looks.index(pairs)
    pooled = spec.pooled_equivalence_t[k] if spec.pooled_equivalence_t else 0.0
    return Critical(spec.equivalence_t[k], math.inf, pooled, math.inf,
                    spec.guard[k] if spec.guard else 0.0, spec.pooled_df[k] if spec.pooled_df else 0)


def unresolvable(spec: WitnessSpec, d: np.ndarray, own_claim_s: float) -> bool:
    """Would the bot's last look miss `own_claim_s` (what a cell claims beyond the margin) even
    were it the mean saving? Its lower bound then lies a critical value times the sd over
    sqrt(pairs) below it: the floor's where the witness has one, else the pairs' own so far. The
    harness stops there only for a head whose ids disagree with main's."""
    n = spec.looks[-1]
    if spec.sd_floor_s > 0 and spec.pooled_stop_t:
        width = spec.pooled_stop_t[-1] * spec.sd_floor_s / math.sqrt(n)
    else:
        width = spec.stop_t[-1] * float(np.std(d, ddof=1)) / math.sqrt(n)
    return own_claim_s <= width


def look_critical(spec: WitnessSpec, k: int) -> Critical:
    """The bot's critical values of look k as the job carries them (no spoof_t: the harness
    never stops on a contradiction; no pooled values: the own sd)."""
    def at(values: tuple[float, ...], default: float) -> float:
        return values[k] if values else default

    return Critical(spec.stop_t[k], at(spec.spoof_t, math.inf), at(spec.pooled_stop_t, 0.0),
                    at(spec.pooled_spoof_t, math.inf), at(spec.guard, 0.0),
                    spec.pooled_df[k] if spec.pooled_df else 0)


def to_confirm(spec: WitnessSpec, last_decisions: Mapping[str, str]) -> list[str]:
    """The covered cells the witness must confirm: improved at the run's end, `improving`
    included (a cell still settling its tier at its last look is graded improved,
    engine.contract.shared.stats.final_decision). None: the witness need not run."""
    return [key for key in spec.cells if last_decisions.get(key) in ("improved", "improving")]


def stop_margin(claims: Mapping[str, tuple[float, float]], improved: Iterable[str]) -> float:
    """The smallest lower bound at which the bot would confirm one of the improved cells."""
    margins = [others_claims(claims, k) for k in improved if k in claims and claims[k][0] > 0]
    return min(margins) if margins else math.inf


def _prompt(spec: WitnessSpec, prompts: Path) -> list[int]:
    """Fresh ids from the OS's random source (the prompt's, then a stepped witness's one per
    step), written where the sandbox may read them only for a wall-clock witness (the others'
    reach the process on stdin after READY)."""
    ids = [secrets.randbelow(spec.id_range) for _ in range(spec.prompt_tokens + spec.steps)]
    if spec.clock != "wall":
        return ids
    prompts.mkdir(parents=True, exist_ok=True)
    prompts.chmod(0o755)
    for name, text in (("prompt.txt", " ".join(map(str, ids)) + "\n"),
                       ("prompt.json", json.dumps(ids))):
        (prompts / name).write_text(text)
        (prompts / name).chmod(0o644)
    return ids


def handoff_of(spec: WitnessSpec, ids: list[int]) -> proc.Handoff | None:
    """What the harness writes after READY (the prompt's ids as one line, then a stepped
    witness's one per output line) and the output lines it answers; None for a wall clock."""
    if spec.clock == "wall":
        return None
    prompt, steps = ids[:spec.prompt_tokens], ids[spec.prompt_tokens:]
    line = (" ".join(map(str, prompt)) + "\n").encode()
    if len(line) > HANDOFF_PROMPT_CAP:  # one pipe buffer: the write never waits on the process
        raise ValueError(f"witness {spec.name}: a {len(line)}-byte prompt exceeds the "
                         f"handoff's {HANDOFF_PROMPT_CAP} bytes")
    prefix = STEP if spec.steps else str(spec.output.get("prefix", ""))
    return proc.Handoff(READY.encode(), line, prefix.encode(),
                        tuple(f"{i}\n".encode() for i in steps))


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
