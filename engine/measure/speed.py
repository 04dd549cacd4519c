"""Alternating base/head pairs per sweep, the on-box stopping rule, every sample recorded.

Protocol per run (one process yields one sample of each of its cells): warm up each build, then
pairs of one base and one head process in ABBA order (base first in even pairs, head first in
odd ones), so a slow drift of the box cancels within two pairs. A pair where either sample saw
a distorting throttle reason, or (rule version 3) where the fault screen finds a sample far
slower than its side's fastest (engine/contract/shared/faults.py), is dropped whole (never only the
head's sample) and measured again on the box's account, up to faults.attempts_cap pairs in all.
The rule looks at the kept-pair counts the bot chose (engine/contract/shared/run_looks.py); decided
cells stop looking, and a run stops once all its cells are decided. The grader replays it all
(engine/contract/shared/replay.py).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..contract.job import Cell, Job, SpeedRun
from ..contract.shared import faults, stats, wall_clock, witness_interval
from ..contract.shared.replay import bounds_of, run_cell, run_looks_of
from ..contract.shared.run_looks import RunLooks
from ..contract.shared.witness_interval import Critical, Floor
from ..contract.witness_spec import WitnessSpec
from ..sandbox import cpu_meter, proc
from ..sides.build import Built, verify
from . import gpu, spoof, witness, witness_plan
from .parsing import ParseError, read_argmax, read_rates

SIDES = ("base", "head")
__all__ = ["SIDES", "CellRecord", "Measurement", "SampleFailure"]


@dataclass
class SampleFailure(Exception):
    side: str
    kind: str  # crashed | timeout | unparsable | spoofed | tampered
    message: str
    log: Path | None = None


@dataclass
class CellRecord:
    cell: Cell
    samples: list[dict[str, Any]] = field(default_factory=list)
    looks: list[dict[str, Any]] = field(default_factory=list)
    stopped: str = ""
    decode_argmax: dict[str, list[int]] = field(default_factory=dict)  # side -> greedy tokens
    clock_lock: str = ""

    @property
    def decided(self) -> bool:
        return bool(self.looks) and self.looks[-1]["decision"] in stats.FINAL

    def value(self, pair: int, side: str) -> float:
        return next(s["value"] for s in self.samples
                    if s["pair"] == pair and s["side"] == side and not s["dropped"])

    def kept(self, side: str) -> list[float]:
        return [s["value"] for s in self.samples if s["side"] == side and not s["dropped"]]

    def to_dict(self) -> dict[str, Any]:
        c = self.cell
        return {
            "model": c.model,
            "metric": c.metric,
            "ctx": c.ctx,
            "unit": c.unit,
            "higher_is_better": c.higher_is_better,
            "anchor": c.anchor,
            "clock_lock": self.clock_lock,
            "samples": self.samples,
            "looks": self.looks,
            "stopped": self.stopped,
            "decode_argmax": self.decode_argmax,
        }


class Measurement:
    """Runs the sweeps of one job; `records` holds every cell's samples and looks; `stage` is
    the harness's stopwatch, timing the warm-ups and the witnesses apart from the rest."""

    def __init__(self, job: Job, built: dict[str, Built], jobdir: Path, harness: Path,
                 tokens: Path | None = None,
                 stage: Callable[[str], AbstractContextManager[object]] = lambda _: nullcontext()) -> None:
        self.job, self.built, self.jobdir, self.harness, self.stage = job, built, jobdir, harness, stage
        self.tokens = tokens  # real corpus tokens for the timed decode, when the profile asks
        self.records = {c.key: CellRecord(c) for c in job.cells}
        self.models = {m.name: m.path for m in job.models}
        self.seq = 0
        self.start = self.now()
        self.deadline = self.start + job.rule.budget_s
        self.schedule = bounds_of(asdict(job.rule))
        self.witnesses: list[witness.WitnessRecord] = []  # every run's, in run order
        self.wall_reasons: dict[str, str] = {}  # per run's first cell: its unexplained saving
        # box seconds of every sample process (warm-ups included) and of every witness process:
        # the witnesses may take the rule's witness_share of the first, all runs so far together
        self.measured_s = 0.0
        self.witnessed_s = 0.0

    def now(self) -> float:
        """The budget's clock (a simulation of the box replaces it with its own)."""
        return time.monotonic()

    def run_all(self, progress: Any = None) -> None:
        locked, note = gpu.lock_clocks() if self.job.rule.lock_clocks else (
            False, "not locked: the box config does not allow it")
        for rec in self.records.values():
            rec.clock_lock = note
        try:
            for run in self.job.runs:
                self._run(run, progress)
                self._check_claims(run)  # every run's claims, not only the last one's
            with self.stage("witnesses"):
                self._witness_all()
        finally:
            if locked:
                gpu.reset_clocks()

    def _run(self, run: SpeedRun, progress: Any) -> None:
        with self.stage("warmups"):
            warm = [self._sample(run, s, warmup=True)[0] for _ in range(self.job.rule.warmup) for s in SIDES]
        main = [s["wall_s"] for w in warm for s in w.values() if s["side"] == "base"]
        if run is self.job.runs[0]:  # the budget counted in pairs, at main's pace (rule.total_budget_s)
            total = self.job.rule.total_budget_s(main[-1] if main else None)
            self.deadline = max(self.deadline, self.start + total)  # never shrinks
        self._reserve_first_verdict(main)
        rule = asdict(self.job.rule)
        looks = run_looks_of([run_cell(self.records[c.key].to_dict(), rule) for c in run.cells],
                             rule)
        on_to = 0  # the pairs the run measures on to for its wall clock (wall_clock.py)
        for attempt in range(faults.attempts_cap(self.job.rule.looks[-1],
                                                 self.job.rule.fault_sigmas)):
            if looks.done:
                on_to = self._on_to(run, looks, on_to, max(main[-1:], default=0.0))
                if len(looks.kept) >= on_to:
                    break
            if self.now() > self.deadline:
                self._stop(run, "budget")
                return
            order = SIDES if attempt % 2 == 0 else SIDES[::-1]  # ABBA
            rates = {side: self._sample(run, side) for side in order}
            throttled = any(r[1] for r in rates.values())
            for cell in run.cells:
                for side in order:
                    self.records[cell.key].samples.append(
                        {**rates[side][0][cell.key], "pair": attempt, "dropped": throttled})
            looks.add({c.key: (rates["base"][0][c.key]["value"],
                                       rates["head"][0][c.key]["value"]) for c in run.cells},
                              throttled)
            self._drops(run, looks)
            if progress is not None:  # every pair: a calibration's one look comes at its end
                progress(run, len(looks.kept), self.records)
        self._stop(run, "decided" if looks.done and all(looks.decided(c.key) for c in run.cells)
                   else "last_look")

    def _on_to(self, run: SpeedRun, looks: RunLooks, on_to: int, main_s: float) -> int:
        """The pairs a decided run measures on to: its next look while its wall clock cannot
        rule its unwitnessed unchanged cells in and more pairs could (issue 53: more pairs, not
        a false flag and not a hidden slowdown), at most the rule's last; 0: it stops. Those
        pairs get their time at main's pace (`main_s` a process) whatever the budget's state,
        as a run's first verdict look does: a run cut before it could rule its cells in would
        leave an honest PR not believed. The PR cannot set main's pace."""
        kept = len(looks.kept)
        if kept < on_to:
            return on_to
        target = min([n for n in self.job.rule.looks if n > kept], default=0) \
            if self._measures_on(run, looks) else 0
        if target:
            self.deadline = max(self.deadline, self.now() + (target - kept) * 2 * main_s)
        return target

    def _measures_on(self, run: SpeedRun, looks: RunLooks) -> bool:
        """Does the run measure on for its cells no witness times, decided unchanged: its wall
        clock does not rule them in on the pairs so far, and more pairs could
        (wall_clock.measure_on; evalbot/grading/unexplained_cost.py judges the same pairs)."""
        rule = self.job.rule
        if not (rule.witness_every_cell and run.cost_critical) or \
                witness_plan.regression_decides(self.records, rule):
            return False
        timed = {k for spec in run.witnesses for k in spec.cells}
        last = {c.key: self.records[c.key].looks[-1]["decision"] for c in run.cells}
        judge = [k for k, d in last.items() if k not in timed and d in ("neutral", "slower")]
        samples = self._samples_witness(run)
        if not judge or samples is None:
            return False
        t, t_pooled, guard = run.cost_critical[max(
            i for i, n in enumerate(rule.looks) if n <= len(looks.kept) or i == 0)]
        return wall_clock.measure_on(
            samples, {c.key: self.records[c.key].to_dict() for c in run.cells}, judge,
            Critical(t, t, t_pooled, t_pooled, guard), Floor(run.cost_floor_s, run.cost_floor_df),
            rule.margin, {c.key: c.floor for c in looks.cells})

    def _drops(self, run: SpeedRun, looks: RunLooks) -> None:
        """The run's records after a pair: each sample's drop (throttled, or faulted: the screen
        finds earlier faults too) and each cell's looks. A dropped pair is measured again on the
        box's account: its seconds move the deadline (the budget is charged for kept pairs)."""
        dropped, faulted = set(looks.dropped), looks.faulted
        before = self._dropped_s(run)
        for cell in run.cells:
            rec = self.records[cell.key]
            for sample in rec.samples:
                sample["dropped"] = sample["pair"] in dropped
                sample["fault"] = sample["pair"] in faulted
            rec.looks = [lk.to_dict() for lk in looks.looks.get(cell.key, [])]
        self.deadline += self._dropped_s(run) - before

    def _dropped_s(self, run: SpeedRun) -> float:
        return sum(s["wall_s"] for s in self.records[run.cells[0].key].samples if s["dropped"])

    def _reserve_first_verdict(self, main_walls: list[float]) -> None:
        """Each run gets the time of its first verdict look at main's pace (a pair: two of main's
        warm-up samples), whatever the runs before it spent: budget_s suits the profile's pace,
        and a slower box must not leave a model unmeasured. The PR cannot set main's pace."""
        verdict_pairs = min((b.pairs for b in self.schedule if b.directional_floor >= 0),
                            default=self.job.rule.looks[-1])
        self.deadline = max(self.deadline, self.now() + verdict_pairs * 2 * max(main_walls[-1:], default=0.0))

    def _stop(self, run: SpeedRun, why: str) -> None:
        for cell in run.cells:
            rec = self.records[cell.key]
            rec.stopped = "decided" if rec.decided else why

    def _verified(self, side: str, kind: str) -> tuple[Built, Path]:
        """The side's artifacts, re-verified before every process, and the next log's path."""
        built = self.built[side]
        try:
            verify(built)
        except (RuntimeError, OSError) as exc:
            raise SampleFailure(side, "tampered", str(exc)) from exc
        self.seq += 1
        return built, self.jobdir / "logs" / f"{kind}-{self.seq:05d}-{side}.log"

    def _sample(self, run: SpeedRun, side: str, warmup: bool = False) -> tuple[dict, bool]:
        built, log = self._verified(side, "sample")
        argv = [self._fill(a, run, built) for a in run.argv]
        before = gpu.gpu_state()
        done = proc.run(argv, cwd=built.artifact_dir, timeout_s=run.timeout_s, log=log, env=self.job.env)
        after = gpu.gpu_state()
        self.measured_s += done.wall_s
        if done.timed_out:
            raise SampleFailure(side, "timeout", f"sample exceeded {run.timeout_s:.0f} s", log)
        if not done.ok:  # exited non-zero, or went past a cap of the sandbox's
            raise SampleFailure(side, "crashed", done.why, log)
        try:
            rates = read_rates(done.output, run.parse, run.cells)
        except ParseError as exc:
            raise SampleFailure(side, "unparsable", str(exc), log) from exc
        self._check_timing(run, rates, done.wall_s, side, log)
        try:
            for key, tokens in read_argmax(done.output, run.parse, run.cells).items():
                self.records[key].decode_argmax.setdefault(side, tokens)
        except (ParseError, TypeError, ValueError) as exc:
            raise SampleFailure(side, "unparsable", str(exc), log) from exc
        if not warmup:
            log.unlink(missing_ok=True)  # keep logs of failures only; samples live in results
        throttled = bool((before or {}).get("throttled") or (after or {}).get("throttled"))
        per_cell = {
            key: {"side": side, "seq": self.seq, "value": rate, "wall_s": round(done.wall_s, 4),
                  "gpu_before": before, "gpu_after": after, "throttled": throttled}
            for key, rate in rates.items()
        }
        return per_cell, throttled

    def witness_dicts(self) -> list[dict[str, Any]]:
        """The results' `witnesses`: each run's samples as one (they can only contradict a
        claim: their output is not verified), then the witness workloads."""
        out = [w for run in self.job.runs if (w := self._samples_witness(run)) is not None]
        return out + [w.to_dict() for w in self.witnesses]

    def _samples_witness(self, run: SpeedRun) -> dict[str, Any] | None:
        first = self.records[run.cells[0].key].samples
        if not first:
            return None
        return {
            "name": f"samples:{run.model}", "source": "samples", "clock": "wall",
            "cells": {c.key: self._tokens(run, c) for c in run.cells},
            "samples": [{"pair": s["pair"], "side": s["side"], "seconds": s["wall_s"],
                         "dropped": s["dropped"], "verified": False} for s in first],
            **({"sd_floor_s": run.cost_floor_s, "floor_df": run.cost_floor_df}
               if run.cost_floor_df else {}),
            **({"wall_reason": why} if (why := self.wall_reasons.get(run.cells[0].key))
               else {})}

    def _witness_all(self) -> None:
        """Every run's witness workloads, after all the measuring (so the share counts all of
        it), in engine.measure.witness_plan's order."""
        rule = self.job.rule
        todo = [(run, spec, witness_plan.to_confirm(spec, self.records, rule))
                for run in self.job.runs for spec in run.witnesses]
        todo = witness_plan.order([t for t in todo if t[2]], self.records, rule)
        # a regression the policy REJECTs settles the verdict before any witness could
        refuted = witness_plan.regression_decides(self.records, rule)
        capped = False  # a cell settled not believed: eval:inconclusive at best
        for run, spec, improved in todo:
            # it could not change the verdict: kept, unrun, so the comment says why
            if refuted or (capped and not witness_plan.claims_gain(improved, self.records)) or (
                    not rule.witness_aa
                    and witness_plan.narrower_cover(spec, improved, run.witnesses)):
                self.witnesses.append(witness.WitnessRecord(spec, stopped="not_needed"))
                continue
            # every improved cell's witness runs, also below a confirmed tier: a cell whose
            # gain the harness did not time is not believed (issue 53, one clock)
            settled_by = self._witness(run, spec, improved).settled_by
            refuted = settled_by == "contradicted"  # printed rates refuted: REJECT, whatever else
            capped = capped or witness_plan.caps_headline(settled_by, improved, self.records, rule)

    def _witness(self, run: SpeedRun, spec: WitnessSpec,
                 improved: list[str]) -> witness.WitnessRecord:
        """One witness workload, timed here; judged by the bot (evalbot/confirmation)."""
        def fill(arg: str, side: str) -> str:
            return self._fill(arg, run, self.built[side])

        if spec.clock == "cpu" and not cpu_meter.available():
            spec = replace(spec, clock="handoff")  # no cgroup here: the handoff clock alone
        claims = {key: c for key, tokens in spec.cells.items()
                  for c in [witness_interval.claimed_saving(self.records[key].samples, tokens,
                                                   self.records[key].cell.higher_is_better)]
                  if c is not None}
        room = witness_plan.room(spec, self.job.rule, self.deadline - self.now(),
                                 self.deadline - self.start, self.measured_s, self.witnessed_s)
        # no warm-up of its own: the samples have just warmed caches and clocks
        # timed both ways (issue 53): an unchanged cell is believed once a slowdown of the rule's
        # witness margin is ruled out, so the witness measures on until it is
        both_ways = self.job.rule.witness_every_cell and not self.job.rule.witness_aa
        unchanged = [k for k in improved if self.records[k].looks[-1]["decision"]
                     not in ("improved", "improving")] if both_ways else []
        own = [k for k in unchanged if not witness_plan.timed_by_narrower(k, spec, run.witnesses)]
        stop = replace(witness.stop_for(claims, improved),
                       unchanged_only=both_ways and len(unchanged) == len(improved),
                       believe_above_s=witness_interval.believed_above(claims, own, self.job.rule.margin))
        record = witness.measure(spec, fill, functools.partial(self._timed, spec=spec),
                                 self.jobdir / "witness-prompts", warmup=0, stop=stop, room=room)
        self.witnessed_s += witness.box_s(record.samples)
        self.witnesses.append(record)
        return record

    def _timed(self, side: str, argv: list[str], timeout_s: float, prompt: list[int],
               spec: WitnessSpec) -> witness.Timed:
        built, log = self._verified(side, "witness")
        before = gpu.gpu_state()
        handoff = witness.handoff_of(spec, prompt)
        try:
            done = proc.run(argv, cwd=built.artifact_dir, timeout_s=timeout_s, log=log,
                            env=self.job.env, handoff=handoff, cpu_clock=spec.clock == "cpu")
        except OSError as exc:  # e.g. a witness tool the build did not produce: no proof
            return witness.Timed(False, "", 0.0, False, f"could not start: {exc.strerror}")
        after = gpu.gpu_state()
        seconds = done.cpu_s if spec.clock == "cpu" else done.handoff_s
        error = (done.why if not done.ok else
                 "no ready line, or not every output line after it"
                 if handoff and seconds is None else "")
        if not error:
            log.unlink(missing_ok=True)
        throttled = bool((before or {}).get("throttled") or (after or {}).get("throttled"))
        if spec.clock == "wall":
            seconds = done.wall_s
        return witness.Timed(not error, done.output, seconds or 0.0, throttled, error,
                             done.wall_s)

    def _fill(self, arg: str, run: SpeedRun, built: Built) -> str:
        return arg.format(python=sys.executable, harness=str(self.harness),
                          build=str(built.artifact_dir), model=self.models[run.model],
                          ctxs=",".join(str(c) for c in sorted({c.ctx for c in run.cells})),
                          ctx=str(run.cells[0].ctx), tokens=str(self.tokens or ""))

    def _check_claims(self, run: SpeedRun) -> None:
        """The head's claimed saving should show in our wall times; where not, the run's samples
        witness carries the reason: not believed, never a REJECT (docs/trust.md section 5)."""
        samples = [spoof.Sample(s["pair"], s["side"], s["wall_s"],
                                sum(self._tokens(run, c) / self.records[c.key].value(s["pair"], s["side"])
                                    for c in run.cells))
                   for s in self.records[run.cells[0].key].samples if not s["dropped"]]
        if reason := spoof.unexplained_saving(samples):
            self.wall_reasons[run.cells[0].key] = reason

    @staticmethod
    def _tokens(run: SpeedRun, cell: Cell) -> int:
        return cell.ctx if cell.metric == "prefill" else run.tokens_per_sample.get("decode", 0)

    def _check_timing(self, run: SpeedRun, rates: dict[str, float], wall: float, side: str,
                      log: Path) -> None:
        """A self-reported rate faster than the process's own wall time allows is a lie."""
        claimed = sum(self._tokens(run, cell) / rates[cell.key] for cell in run.cells)
        if claimed > wall * 1.02 + 0.005:
            raise SampleFailure(side, "spoofed", f"rates imply {claimed:.3f} s of work in a "
                                f"{wall:.3f} s process", log)
