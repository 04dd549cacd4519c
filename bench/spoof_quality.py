"""Can a head that prints rates it does not have earn a tier? And does an honest one keep it?

Simulation: for a shipped profile (its cells, stopping rule, witnesses, as `evalbot.evaluation.jobspec`
builds the job), draws whole evaluations: paired samples per run with the on-box stopping rule
(engine.measure.stats, stopping a run once all its cells are decided, as engine/measure/speed.py does), the
run's witnesses when a covered cell came out improved, then grades the results document with the
real grading (evalbot.grading.grade.grade: replay, confirmation, tier). True rates and timings per
profile are the measured ones (docs/gpu-e2e.md, shared/engines/README.md); the witness process is
its load (with a jitter) plus its cells' true work, each with the cell's per-process noise; a
sample process is its fixed part (sample_s less the cells' work at main's rates, with the same
jitter) plus its cells' work at the side's real rates, and the harness's check of the samples'
wall times (engine/measure/spoof.py) stops a run whose claims they contradict, as on the box.

Heads:
  lie F all       prints F x its rates on every cell; really as fast as main (its witness work
                  is honest: a witness's time is the work done, whatever the process prints)
  lie F one       prints F x on the first witnessed cell only
  lie F ctx       prints F x on every cell at the first witnessed cell's context only
  honest +G       really G faster on every cell, printing the truth
  junk tail a     its witness computes the first share a of its output ids and invents the
                  rest (agreement a, verified at the profiles' min_agreement 0.5), its bench
                  tool skips the same share of its decode work and prints rates true to the
                  work it did (so the samples' wall times agree with them): a claimed saving
                  of 1 - a of the decode work, made of work it never did

Columns: P(tier) = share of evaluations with a tier; witnesses alone = the same, had the
samples' wall-time check never fired (a head that hides its claim there, e.g. by skipping work
the samples do not time: only the witnesses stand between it and a tier); unwitnessed = the
same results graded as a harness before witnesses graded them (the statistics alone);
P(spoofed) = share rejected as spoofed; measure s = mean box time of the measuring (warm-up
included) per evaluation; witness s = that of the witnesses the harness ran (each process's
`wall_s`, start to exit: a handoff clock's own seconds leave out the load), and its ratio to
the measuring (added); witnesses alone: s and added, the same had the samples' check never
fired (an upper bound: that check only spares witnesses).

Demo engine (`--demo N`): N real evaluations per case on this machine, through the harness and
the grading (lie 2x all, lie 1.05x all, honest = the demo's `faster` variant).

Usage: python bench/spoof_quality.py [--sims 300] [--seed 1] [--demo 0] [--profiles llamacpp]
       [--heads honest,1.05x] [--noise measured,1%]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.measure import speed, spoof, stats, witness  # noqa: E402
from evalbot.config.settings import BoxConfig  # noqa: E402
from evalbot.evaluation.jobspec import WITNESS_FLOOR, make_job  # noqa: E402
from evalbot.evaluation.profile import Profile, load_profile  # noqa: E402
from evalbot.grading.grade import grade  # noqa: E402
from evalbot.grading.policy import load_labels  # noqa: E402
from evalbot.service.calibrate import calibration_job, witness_noise  # noqa: E402

POLICY = load_labels(ROOT / "evalbot" / "labels.yaml").policy("default")
BOX = BoxConfig(name="sim", kind="local", workdir="/tmp/sim", repo="/tmp/sim")
SHA = "0" * 40
CALIBRATION_PAIRS = 12  # evalbot calibrate's default --pairs


@dataclass(frozen=True)
class Box:
    """A profile's measured behaviour: true rates, per-process noise, process timings."""

    name: str
    rates: dict[str, float]  # "metric@ctx" -> main's true tok/s (the first match wins)
    noise: dict[str, float]  # "metric@ctx" or metric -> per-process sd of the log rate
    load_s: float  # a witness process's start-up (model load)
    load_jitter_s: float  # each process's own: what a pair's difference sees
    sample_s: float  # one sample process of a run (wall)
    handoff_jitter_s: float = 0.005  # the handoff clock's own (pipe, scheduling): assumed
    pair_drift_s: float = 0.0  # a slow drift both processes of a pair share (cancels in it)
    sample_jitter_s: float | None = None  # a sample process's wall jitter (None: load_jitter_s)
    # a run's own sample time where it differs from sample_s, by "model@largest ctx"
    run_sample_s: dict[str, float] = field(default_factory=dict)
    # main's true rate in a witness process where its tool is slower than the bench's (the first
    # match wins, else `rates`)
    witness_rates: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Head:
    """A head of the table: the factor its printed rates carry per cell key, its real gain on
    every cell, and the share of its witness's output ids it computes (the rest invented)."""

    name: str
    printed: dict[str, float]
    gain: float = 0.0
    agreement: float = 1.0

    def real(self, metric: str) -> float:
        """Its real speed-up of a cell's work in a sample (skipped work included)."""
        return (1 + self.gain) / (self.agreement if metric == "decode" else 1.0)


def _lookup(table: dict[str, float], metric: str, ctx: int, default: float) -> float:
    return table.get(f"{metric}@{ctx}", table.get(metric, default))


BOXES = {
    # docs/gpu-e2e.md (H200, Qwen3-0.6B synthetic F16): CV between processes; samples 8.6-9.9 s
    # (sd 0.24 s); the handoff witness (scripts/gpu_witness_timings.sh, 25 A/A pairs): 2.11 s on
    # its clock (0.1 s of prefill, 896 decode steps of 2.24 ms: 446 tok/s against llama-bench's
    # 526), 3.67 s a process (sd 0.18 s), so a load of 1.57 s
    "llamacpp": Box("llamacpp measured", {"decode@0": 585.0, "decode@4096": 526.0,
                                          "prefill@0": 41000.0, "prefill@4096": 26400.0},
                    {"decode": 0.011, "prefill@0": 0.054, "prefill@4096": 0.012},
                    1.57, 0.18, 9.0, sample_jitter_s=0.24,
                    witness_rates={"decode@4096": 446.0}),
    # shared/engines/README.md (H200, synthetic Qwythos-9B): 0.04-0.25% between rounds; the
    # generate witness measured 15.1-15.4 s a process (sd 0.080 s) but its pairs' differences
    # only 0.047 s (6 pairs, tests/data/sparkinfer/phase2-speedup-h200.results.json): each
    # process's own jitter 0.047/sqrt(2) = 0.033 s, the rest (0.073 s) a drift a pair shares
    # A sample: the 0/4k/32k/64k sweep 25.6 s, the 128k run's 30.7 s (both measured, the
    # profile's comments). The MoE run has no measurement (its profile estimates ~2 min a
    # sweep and ~440 tok/s for its witness): it is simulated at the dense model's figures.
    "sparkinfer": Box("sparkinfer measured", {"decode": 340.0, "prefill": 9000.0},
                      {"decode": 0.0025, "prefill": 0.0025}, 0.3, 0.033, 25.6,
                      pair_drift_s=0.073, sample_jitter_s=0.08,
                      run_sample_s={"qwythos-9b@131072": 30.7}),
}


def at_noise(box: Box, sd: float) -> Box:
    return replace(box, name=f"{box.name.split()[0]} at {100 * sd:.0f}% noise",
                   noise={"decode": sd, "prefill": sd})


def _rate(box: Box, metric: str, ctx: int) -> float:
    return _lookup(box.rates, metric, ctx, box.rates.get(metric, 1000.0))


def simulate(profile: Profile, box: Box, head: Head, rng: np.random.Generator,
             floors: dict[str, float] | None = None
             ) -> tuple[dict[str, Any], dict[str, Any], float, float, float]:
    """One evaluation: (results document as the harness writes it, the same evaluation had the
    samples' own check (engine/measure/spoof.py) never fired: the witnesses alone, the
    witnesses' box s in each case, measuring box s)."""
    job = make_job(profile, POLICY, BOX, SHA, "1" * 40, seed=1, sd_floors=floors,
                   floor_df=CALIBRATION_PAIRS - 1)
    rule = asdict(job.rule)
    cells: list[dict[str, Any]] = []
    measure_s, witness_s, ran_s = 0.0, 0.0, 0.0
    full: list[dict[str, Any]] = []  # what the harness records: it stops at a spoofed run
    alone: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    for run in job.runs:
        records, n = _run_samples(run, box, head, rule, rng)
        cells += records.values()
        measure_s += (n + job.rule.warmup) * 2 * _sample_s(box, run)
        reason = _unexplained(run, records)
        if not failures:
            full.append(_samples_witness(run, records))
        if reason and not failures:
            failures.append({"stage": "speed", "side": "head", "attribution": "pr",
                             "kind": "spoofed", "message": reason, "log_tail": ""})
        stopped = bool(failures)
        last = {k: r["looks"][-1]["decision"] for k, r in records.items() if r["looks"]}
        for spec in run.witnesses:  # as engine/measure/speed.py runs them
            improved = witness.to_confirm(spec, last)
            if not improved:
                continue
            claims = {k: c for k, t in spec.cells.items()
                      for c in [witness.claimed_saving(records[k]["samples"], t)] if c}
            allowance = job.rule.witness_share * measure_s - witness_s  # as speed.py gives it
            w = _witness(spec, run, box, head, witness.stop_for(claims, improved), rng, allowance)
            witness_s += witness.box_s(w["samples"])  # box time, whatever the clock
            alone.append(w)
            if not stopped:
                full.append(w)
                ran_s += witness.box_s(w["samples"])
    common = {"rule": rule, "models": [asdict(m) for m in job.models], "cells": cells,
              "correctness": None, "job_id": "sim", "profile": profile.name,
              "base": {"sha": SHA}, "head": {"sha": "1" * 40}, "box": {}}
    return ({**common, "witnesses": full, "failures": failures},
            {**common, "witnesses": alone, "failures": []}, ran_s, witness_s, measure_s)


def _sample_s(box: Box, run: Any) -> float:
    return box.run_sample_s.get(f"{run.model}@{max(c.ctx for c in run.cells)}", box.sample_s)


def _run_samples(run: Any, box: Box, head: Head, rule: dict[str, Any],
                 rng: np.random.Generator) -> tuple[dict[str, dict[str, Any]], int]:
    """A run's paired samples; each sample's wall time is the process's fixed part (load,
    untimed work: sample_s less the cells' work at main's true rates, with the load's jitter)
    plus the cells' work at the side's real rates."""
    last = rule["looks"][-1]
    records: dict[str, dict[str, Any]] = {}
    work = {"base": np.zeros(last), "head": np.zeros(last)}
    fixed = _sample_s(box, run)
    for cell in run.cells:
        true = _rate(box, cell.metric, cell.ctx)
        sd = _lookup(box.noise, cell.metric, cell.ctx, 0.01)
        base = true * np.exp(rng.normal(0, sd, last))
        real = true * head.real(cell.metric) * np.exp(rng.normal(0, sd, last))
        printed = real * head.printed.get(cell.key, 1.0)
        tokens = _tokens(run, cell)
        fixed -= tokens / true
        work["base"] += tokens / base
        work["head"] += tokens / real
        samples = []
        for p in range(last):
            order = (("base", base[p]), ("head", printed[p]))
            # seq: which process of this run measured it (the grader groups a run's cells by it)
            samples += [{"pair": p, "side": s, "value": float(v), "dropped": False,
                         "seq": (id(run), 2 * p + i)}
                        for i, (s, v) in enumerate(order if p % 2 == 0 else order[::-1])]
        records[cell.key] = {"model": cell.model, "metric": cell.metric, "ctx": cell.ctx,
                             "unit": "tok/s", "higher_is_better": True, "anchor": cell.anchor,
                             "samples": samples, "looks": []}
    jitter = box.load_jitter_s if box.sample_jitter_s is None else box.sample_jitter_s
    wall = {side: fixed + w + rng.normal(0, jitter, last) for side, w in work.items()}
    for r in records.values():
        for smp in r["samples"]:
            smp["wall_s"] = float(wall[smp["side"]][smp["pair"]])
    n = last
    for k in rule["looks"]:  # the run stops at the first look where every cell is decided
        if _all_decided(list(records.values()), k, rule):
            n = k
            break
    for r in records.values():
        r["samples"] = [s for s in r["samples"] if s["pair"] < n]
    # the run's cells test their calibration together, as the harness and the grader do
    for r, looks in zip(records.values(), speed.replay_all(list(records.values()), rule),
                        strict=True):
        r["looks"] = [lk.to_dict() for lk in looks]
    return records, n


def _tokens(run: Any, cell: Any) -> int:
    """The tokens of a cell's work in one sample, as the harness counts them (speed.py)."""
    return cell.ctx if cell.metric == "prefill" else run.tokens_per_sample.get("decode", 0)


def _samples_witness(run: Any, records: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The run's samples as the results keep them: a witness that can only contradict."""
    first = records[run.cells[0].key]["samples"]
    return {"name": f"samples:{run.model}", "source": "samples", "clock": "wall",
            "cells": {c.key: _tokens(run, c) for c in run.cells},
            "samples": [{"pair": s["pair"], "side": s["side"], "seconds": s["wall_s"],
                         "dropped": False, "verified": False} for s in first]}


def _unexplained(run: Any, records: dict[str, dict[str, Any]]) -> str | None:
    """engine/measure/speed.py's check of the claimed work against the samples' wall times."""
    first = records[run.cells[0].key]["samples"]
    value = {(k, s["pair"], s["side"]): s["value"] for k, r in records.items()
             for s in r["samples"]}
    return spoof.unexplained_saving([
        spoof.Sample(s["pair"], s["side"], s["wall_s"],
                     sum(_tokens(run, c) / value[(c.key, s["pair"], s["side"])]
                         for c in run.cells)) for s in first])


def _all_decided(records: list[dict[str, Any]], pairs: int, rule: dict[str, Any]) -> bool:
    cut = [{**r, "samples": [s for s in r["samples"] if s["pair"] < pairs]} for r in records]
    return all(looks and looks[-1].decision in stats.FINAL
               for looks in speed.replay_all(cut, rule))


def _witness(spec: Any, run: Any, box: Box, head: Head, stop: witness.Stop,
             rng: np.random.Generator, allowance_s: float) -> dict[str, Any]:
    """A witness's pairs up to the harness's stop (a settled look, or the pair that would not
    fit in its share of the box time); `seconds` by its clock, `wall_s` the box time of the
    process (a handoff clock's leaves out the load)."""
    by_key = {c.key: c for c in run.cells}
    record = witness.WitnessRecord(spec)
    samples = record.samples
    for p in range(spec.pairs):
        if p and witness.settled(spec, record, p, stop):
            record.stopped = "settled"  # the harness's own stopping rule (engine/measure/witness.py)
            break
        if not witness.fits(samples, p, allowance_s):
            record.stopped = "box_time"
            break
        drift = rng.normal(0, box.pair_drift_s) if spec.clock != "handoff" else 0.0
        for side in (("base", "head") if p % 2 == 0 else ("head", "base")):
            agreement = head.agreement if side == "head" else 1.0
            work = sum(_work_s(box, spec, by_key[k], tokens, head if side == "head" else None)
                       * math.exp(rng.normal(0, _lookup(box.noise, by_key[k].metric,
                                                         by_key[k].ctx, 0.01)))
                       for k, tokens in spec.cells.items())
            load = box.load_s + drift + rng.normal(0, box.load_jitter_s)
            seconds = work + (rng.normal(0, box.handoff_jitter_s) if spec.clock == "handoff"
                              else load)
            samples.append({"pair": p, "side": side, "seconds": seconds, "dropped": False,
                            "verified": agreement >= spec.min_agreement,
                            "agreement": agreement,
                            "wall_s": seconds + (load if spec.clock == "handoff" else 0.0)})
    return record.to_dict()  # as the harness writes it: the floor the bot judges with


def _work_s(box: Box, spec: Any, cell: Any, tokens: int, head: Head | None) -> float:
    """A witness's true seconds for one cell's work: main's, or the head's at its real gain
    less the output positions it invents (a decode cell's; the prompt every id depends on is
    done)."""
    main_s = tokens / _lookup(box.witness_rates, cell.metric, cell.ctx,
                              _rate(box, cell.metric, cell.ctx))
    if head is None:
        return main_s
    invented = (1 - head.agreement) * min(1.0, spec.output_tokens / tokens) \
        if cell.metric == "decode" else 0.0
    return main_s / (1 + head.gain) * (1 - invented)


def cases(profile: Profile) -> list[Head]:
    """Every head of the table."""
    keys = [f"{r.model}/{c.metric}@{c.ctx}" for r in profile.runs for c in r.cells]
    first = next(k for r in profile.runs for w in r.witnesses for k in w.cells)
    ctx = first.rsplit("@", 1)[1]
    out: list[Head] = []
    for f in (1.05, 1.1, 1.3, 2.0, 10.0):
        out.append(Head(f"lie {f:g}x all", {k: f for k in keys}))
        out.append(Head(f"lie {f:g}x one", {first: f}))
        out.append(Head(f"lie {f:g}x ctx", {k: f for k in keys if k.endswith("@" + ctx)}))
    out += [Head(f"junk tail {a:g}", {}, agreement=a) for a in (0.5, 0.75, 0.9)]
    out += [Head(f"honest +{100 * g:.0f}%", {}, g) for g in (0.03, 0.05, 0.10)]
    return out


def calibrated(profile: Profile, box: Box, rng: np.random.Generator) -> dict[str, float]:
    """The witnesses' floors an `evalbot calibrate` (its default pairs) would store on this box:
    each witness's A/A, simulated as the evaluations' witnesses are."""
    job = calibration_job(profile, POLICY, BOX, SHA, CALIBRATION_PAIRS, witnesses=True)
    ran = [_witness(spec, run, box, Head("a/a", {}), witness.Stop(), rng, math.inf)
           for run in job.runs for spec in run.witnesses]
    return {key: sd for key, (sd, _) in witness_noise({"witnesses": ran}).items()}


def table(profile: Profile, box: Box, sims: int, rng: np.random.Generator,
          only: list[str], calibrate: bool = False) -> None:
    floors = calibrated(profile, box, rng) if calibrate else None
    how = (f", witness floors calibrated on it ({CALIBRATION_PAIRS} A/A pairs: " + ", ".join(
        f"{k.removeprefix(WITNESS_FLOOR)} {v:.4f} s" for k, v in floors.items()) + ")"
        if floors else "")
    print(f"\n### {profile.name} profile, {box.name}{how} ({sims} evaluations per head)\n")
    print("| head | P(tier) | witnesses alone | unwitnessed | P(spoofed) | measure s | "
          "witness s | added | witnesses alone: s | added |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for head in cases(profile):
        if only and not any(word in head.name for word in only):
            continue
        tiers = alone = spoofed = plain = 0
        ran = wit = mea = 0.0
        for _ in range(sims):
            results, witnessed, r, w, m = simulate(profile, box, head, rng, floors)
            verdict = grade(results, POLICY)
            tiers += verdict["tier"] is not None
            spoofed += verdict["kind"] == "spoofed"
            alone += grade(witnessed, POLICY)["tier"] is not None
            legacy = {k: v for k, v in witnessed.items() if k != "witnesses"}
            plain += grade(legacy, POLICY)["tier"] is not None
            ran, wit, mea = ran + r, wit + w, mea + m
        print(f"| {head.name} | {100 * tiers / sims:.1f}% | {100 * alone / sims:.1f}% | "
              f"{100 * plain / sims:.0f}% | {100 * spoofed / sims:.1f}% | {mea / sims:.1f} | "
              f"{ran / sims:.1f} | {100 * ran / mea:.0f}% | {wit / sims:.1f} | "
              f"{100 * wit / mea:.0f}% |", flush=True)


def demo_table(runs: int) -> None:
    """Real evaluations of the demo engine on this machine (harness + grading, no scoring)."""
    from engine.contract.job import parse_job
    from engine.demo.repo import generate
    from engine.harness.steps import run_job

    print(f"\n### demo profile, demo engine on this machine ({runs} evaluations per head)\n")
    print("| head | tier | spoofed | witness s | measure s | added |")
    print("|---|---:|---:|---:|---:|---:|")
    root = Path(tempfile.mkdtemp(prefix="spoof-quality-"))
    demo = generate(root / "demo")
    heads = {"lie 2x all": _liar(demo.path, 2.0), "lie 1.05x all": _liar(demo.path, 1.05),
             "honest (faster variant)": demo.prs["faster"]}
    profile = load_profile("demo")
    for name, head in heads.items():
        tiers = spoofed = 0
        wit = mea = 0.0
        for i in range(runs):
            box = BoxConfig(name="local", kind="local", repo=str(demo.path),
                            models_dir=str(demo.model_path.parent), workdir=str(root / "box"))
            doc = json.loads(make_job(profile, POLICY, box, demo.main_sha, head).to_json())
            doc["correctness"], doc["sandbox"] = None, None
            results = run_job(parse_job(copy.deepcopy(doc)), root / f"{len(name)}-{i}")
            verdict = grade(results, POLICY)
            tiers += verdict["tier"] is not None
            spoofed += verdict["kind"] == "spoofed"
            w, m = _box_times(results)
            wit, mea = wit + w, mea + m
        print(f"| {name} | {tiers}/{runs} | {spoofed}/{runs} | {wit / runs:.1f} | "
              f"{mea / runs:.1f} | {100 * wit / max(mea, 1e-9):.0f}% |", flush=True)


def _box_times(results: dict[str, Any]) -> tuple[float, float]:
    """Witness box seconds (each process's start to exit; its clock's seconds from a harness
    before `wall_s`), and the measuring's wall seconds (samples + 1 warm-up pair)."""
    wit = sum(s.get("wall_s", s["seconds"]) for w in results["witnesses"]
              if w["source"] == "witness" for s in w["samples"])
    first = [w for w in results["witnesses"] if w["source"] == "samples"]
    mea = sum(s["seconds"] for w in first for s in w["samples"])
    pairs = sum(len(w["samples"]) for w in first) / 2
    return wit, mea * (pairs + 1) / max(pairs, 1)


def _liar(repo: Path, factor: float) -> str:
    """A commit on main that prints `factor` x its measured rates and is otherwise main."""
    source = (repo / "demo_engine.py").read_text()
    marker = '    print("BENCH_JSON " + json.dumps(result), flush=True)\n'
    liar = source.replace(marker, f"    for r in result.values():\n"
                                  f"        r['decode_tps'] *= {factor}\n"
                                  f"        r['prefill_tps'] *= {factor}\n" + marker)
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@evalbot.invalid"]
    subprocess.run([*git, "checkout", "-q", "--detach", "main"], cwd=repo, check=True)
    (repo / "demo_engine.py").write_text(liar)
    subprocess.run([*git, "commit", "-qam", f"print {factor}x"], cwd=repo, check=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True,
                         capture_output=True, text=True).stdout.strip()
    subprocess.run([*git, "checkout", "-q", "main"], cwd=repo, check=True)
    return sha


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--demo", type=int, default=0, help="real demo evaluations per head")
    ap.add_argument("--profiles", default="llamacpp,sparkinfer")
    ap.add_argument("--heads", default="", help="only heads whose name contains one of these "
                    "comma-separated words (e.g. honest,1.05x)")
    ap.add_argument("--noise", default="measured,1%", help="measured, 1%% or both; either with "
                    "+calibrated: the witnesses' floors are the box's own (evalbot calibrate)")
    a = ap.parse_args(argv)
    only = [w for w in a.heads.split(",") if w]
    rng = np.random.default_rng(a.seed)
    started = time.time()
    for name in filter(None, a.profiles.split(",")):
        profile = load_profile(name)
        boxes = {"measured": BOXES[name], "1%": at_noise(BOXES[name], 0.01)}
        for noise in filter(None, a.noise.split(",")):
            table(profile, boxes[noise.removesuffix("+calibrated")], a.sims, rng, only,
                  calibrate=noise.endswith("+calibrated"))
    if a.demo:
        demo_table(a.demo)
    print(f"\n({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
