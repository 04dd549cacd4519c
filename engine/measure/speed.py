"""Alternating base/head pairs per sweep, the on-box stopping rule, every sample recorded.

Protocol per run (one process yields one sample of each of its cells): warm up each build, then
pairs of one base and one head process in ABBA order (base first in even pairs, head first in
odd ones), so a slow drift of the box cancels within two pairs. A pair where either sample saw
a distorting throttle reason is dropped whole (never only the head's sample) and re-measured,
up to as many extra attempts as the rule has pairs. The rule looks at the pair counts the bot
chose; decided cells stop looking, and a run stops once all its cells are decided.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..contract.job import Cell, Job, SpeedRun
from ..contract.witness_spec import WitnessSpec
from ..sandbox import cpu_meter, proc
from ..sides.build import Built, verify
from . import budget, gpu, spoof, stats, witness, witness_plan
from .parsing import ParseError, read_argmax, read_rates

SIDES = ("base", "head")


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
        self.schedule = {b.pairs: b for b in bounds_of(asdict(job.rule))}
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
        if run is self.job.runs[0]:  # the budget counted in pairs, at main's pace (budget.py)
            total = budget.total_s(self.job.rule, main[-1] if main else None)
            self.deadline = max(self.deadline, self.start + total)  # never shrinks
        self._reserve_first_verdict(main)
        pairs, attempts, last = 0, 0, self.job.rule.looks[-1]
        while pairs < last and attempts < 2 * last:
            if self.now() > self.deadline:
                self._stop(run, "budget")
                return
            order = SIDES if pairs % 2 == 0 else SIDES[::-1]
            rates = {side: self._sample(run, side) for side in order}
            attempts += 1
            throttled = any(r[1] for r in rates.values())
            for cell in run.cells:
                for side in order:
                    self.records[cell.key].samples.append(
                        {**rates[side][0][cell.key], "pair": pairs, "dropped": throttled}
                    )
            if throttled:
                continue  # drop both samples of the pair, never only the head's
            pairs += 1
            if pairs in self.schedule:
                self._look(run, pairs)
                if progress is not None:
                    progress(run, pairs, self.records)
                if all(self.records[c.key].decided for c in run.cells):
                    self._stop(run, "decided")
                    return
        self._stop(run, "last_look")

    def _reserve_first_verdict(self, main_walls: list[float]) -> None:
        """Each run gets the time of its first verdict look at main's pace (a pair: two of main's
        warm-up samples), whatever the runs before it spent: budget_s suits the profile's pace,
        and a slower box must not leave a model unmeasured. The PR cannot set main's pace."""
        verdict_pairs = min((b.pairs for b in self.schedule.values() if b.directional_floor >= 0),
                            default=self.job.rule.looks[-1])
        self.deadline = max(self.deadline, self.now() + verdict_pairs * 2 * max(main_walls[-1:], default=0.0))

    def _look(self, run: SpeedRun, pairs: int) -> None:
        rule = self.job.rule
        ratios = {c.key: stats.log_ratios(self.records[c.key].kept("base"),
                                          self.records[c.key].kept("head"), c.higher_is_better)
                  for c in run.cells}
        floors = [rule.sd_floors.get(c.key, rule.sd_floor) for c in run.cells]
        # every cell of the run, decided or not, tests the calibration (engine/measure/stats.py)
        (refuted,) = stats.refuted_per_look(list(ratios.values()), floors, [self.schedule[pairs]])
        for cell, floor in zip(run.cells, floors, strict=True):
            rec = self.records[cell.key]
            if rec.decided:
                continue
            lk = stats.look(ratios[cell.key], self.schedule[pairs], floor, rule.significance,
                            rule.tolerance, rule.tier_edges.get(cell.key), refuted)
            rec.looks.append(lk.to_dict())

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
        out = []
        for run in self.job.runs:
            first = self.records[run.cells[0].key].samples
            if not first:
                continue
            out.append({
                "name": f"samples:{run.model}", "source": "samples", "clock": "wall",
                "cells": {c.key: self._tokens(run, c) for c in run.cells},
                "samples": [{"pair": s["pair"], "side": s["side"], "seconds": s["wall_s"],
                             "dropped": s["dropped"], "verified": False} for s in first],
                **({"wall_reason": why} if (why := self.wall_reasons.get(run.cells[0].key))
                   else {})})
        return out + [w.to_dict() for w in self.witnesses]

    def _witness_all(self) -> None:
        """Every run's witness workloads, after all the measuring (so the share counts all of
        it), in engine.measure.witness_plan's order."""
        rule = self.job.rule
        todo = [(run, spec, witness_plan.to_confirm(spec, self.records, rule))
                for run in self.job.runs for spec in run.witnesses]
        todo = sorted([t for t in todo if t[2]], reverse=True,
                      key=lambda t: witness_plan.claimed_rank(t[2], self.records, rule))
        confirmed: tuple[int, float] | None = None
        refuted = False
        for run, spec, improved in todo:
            rank = witness_plan.claimed_rank(improved, self.records, rule)
            if refuted or (confirmed is not None and rank[0] <= confirmed[0]):
                # it could not change the verdict: kept, unrun, so the comment can say why
                self.witnesses.append(witness.WitnessRecord(spec, stopped="not_needed"))
                continue
            settled_by = self._witness(run, spec, improved).settled_by
            if settled_by == "confirmed":
                confirmed = max(confirmed or rank, rank)
            refuted = settled_by == "contradicted"  # printed rates refuted: REJECT, whatever else

    def _witness(self, run: SpeedRun, spec: WitnessSpec,
                 improved: list[str]) -> witness.WitnessRecord:
        """One witness workload, timed here; judged by the bot (evalbot/confirmation)."""
        def fill(arg: str, side: str) -> str:
            return self._fill(arg, run, self.built[side])

        if spec.clock == "cpu" and not cpu_meter.available():
            spec = replace(spec, clock="handoff")  # no cgroup here: the handoff clock alone
        claims = {key: c for key, tokens in spec.cells.items()
                  for c in [witness.claimed_saving(self.records[key].samples, tokens,
                                                   self.records[key].cell.higher_is_better)]
                  if c is not None}
        room = witness_plan.room(spec, self.job.rule, self.deadline - self.now(),
                                 self.deadline - self.start, self.measured_s, self.witnessed_s)
        # no warm-up of its own: the samples have just warmed caches and clocks
        record = witness.measure(spec, fill, functools.partial(self._timed, spec=spec),
                                 self.jobdir / "witness-prompts", warmup=0,
                                 stop=witness.stop_for(claims, improved), room=room)
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


def bounds_of(rule: Mapping[str, Any]) -> list[stats.Bounds]:
    """The schedule of a rule (a StoppingRule as a dict, or a results file's `rule`).

    A rule without the floor and equivalence lists is the first version, where one critical
    value served every test: each missing list is `critical` again. A rule without `pool_df`
    has no tier test and no guard (zeros). Lists of another length than `looks` are an error.
    """
    looks, critical = list(rule["looks"]), list(rule["critical"])
    pool_df = int(rule.get("pool_df") or 0)

    def per_look(key: str, default: list[float]) -> list[float]:
        return list(rule.get(key) or default)

    zeros = [0.0] * len(looks)
    return [stats.Bounds(int(n), float(c), float(cf), float(e), float(ef), float(q), float(qf),
                         float(g), pool_df)
            for n, c, cf, e, ef, q, qf, g in zip(
                looks, critical, per_look("critical_floor", critical),
                per_look("equivalence", critical), per_look("equivalence_floor", critical),
                per_look("settle", zeros), per_look("settle_floor", zeros),
                per_look("guard", zeros), strict=True)]


def cell_key(record: Mapping[str, Any]) -> str:
    return f"{record['model']}/{record['metric']}@{record['ctx']}"


def _ratios(record: Mapping[str, Any]) -> Any:
    kept = [s for s in record["samples"] if not s["dropped"]]
    base = [s["value"] for s in kept if s["side"] == "base"]
    head = [s["value"] for s in kept if s["side"] == "head"]
    n = min(len(base), len(head))
    return stats.log_ratios(base[:n], head[:n], record["higher_is_better"])


def _floor(record: Mapping[str, Any], rule: Mapping[str, Any]) -> float:
    return float((rule.get("sd_floors") or {}).get(cell_key(record), rule["sd_floor"]))


def replay(record: Mapping[str, Any], rule: Mapping[str, Any],
           refuted: Sequence[bool] = ()) -> list[stats.Look]:
    """Recompute a cell's looks from its recorded samples; `refuted` per look comes from its
    run (replay_all), as the harness computed it."""
    edges = (rule.get("tier_edges") or {}).get(cell_key(record))
    return stats.sequential(_ratios(record), bounds_of(rule), _floor(record, rule),
                            rule["significance"], rule["tolerance"], edges, refuted)


def replay_all(records: Sequence[Mapping[str, Any]],
               rule: Mapping[str, Any]) -> list[list[stats.Look]]:
    """Every cell's looks, each run's cells testing the calibration together (what the grader
    does). Cells of one run are those of one model whose samples came from the same processes."""
    runs: dict[tuple[Any, ...], list[int]] = {}
    for i, rec in enumerate(records):
        seqs = tuple(s.get("seq") for s in rec["samples"] if not s["dropped"])
        runs.setdefault((rec["model"], seqs), []).append(i)
    schedule = bounds_of(rule)
    out: list[list[stats.Look]] = [[] for _ in records]
    for members in runs.values():
        refuted = stats.refuted_per_look([_ratios(records[i]) for i in members],
                                         [_floor(records[i], rule) for i in members], schedule)
        for i in members:
            out[i] = replay(records[i], rule, refuted)
    return out
