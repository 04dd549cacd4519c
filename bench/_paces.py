"""What a profile's processes cost and how much they vary, read from the measured fixtures under
tests/data/ (never a bench's own constants): a sample process per run, a witness process per
witness. Where no fixture exists (the real Qwen3.6-35B file) the pace is an assumption, its
source says so, and the benches print "pace assumed" beside it.

Shared by bench/spoof_quality.py, bench/verdict_quality.py and tests/test_bench_paces.py.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from evalbot.engine.contract.shared.witness_interval import pair_savings
from evalbot.engine.contract.witness_spec import WitnessSpec

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
ASSUMED = "assumed"
# llamacpp: the shipped profile's own A/A on the H200 (42 pairs of the exact argv, both sides
# main) and the A/A of its shipped witness on the handoff clock (25 pairs, flash attention off)
LLAMACPP_AA = DATA / "llamacpp" / "h200-aa.results.json"
LLAMACPP_WITNESS = DATA / "llamacpp" / "h200-witness-aa.tsv"
LLAMACPP_WITNESS_VARIANT = "nofa"  # the shipped tool (docs/gpu-e2e.md)
# and GPU run 53L's witness A/A on an H100 (16 pairs of every witness, main against main): the only
# timing of the depth witnesses (decode-0, prefill-4096-at-4096), which no H200 ever ran
LLAMACPP_H100_AA = DATA / "llamacpp" / "h100-53L" / "witness-aa.results.json"
# main's printed rates of the shipped bench on that H100 (the same session's hide-prefill: its
# base side): what the witnesses' cells' work takes there, the rest of their span the tool's own
LLAMACPP_H100_MAIN = DATA / "llamacpp" / "h100-53L" / "hide-prefill.results.json"
LLAMACPP_H200_WITNESS = "prefill-4k-decode-896"  # the witness LLAMACPP_WITNESS timed
# sparkinfer: two builds of one commit swept alternately on the H200 (Qwythos-9B synthetic), and
# evalbot's own witness tool (engine/sparkinfer/witness.cpp) on the handoff clock, per process,
# on that model and on a 4-layer synthetic file of the Qwen3.6 shape
SPARK_SWEEPS = DATA / "sparkinfer" / "h200-alternating-sweeps.jsonl"
SPARK_WITNESS = DATA / "sparkinfer" / "witness-h200-timings.jsonl"
SPARK_QWYTHOS, SPARK_QWEN36_SYNTH = "qwythos", "qwen35moe-4layer"  # its `model` field
# fewer pairs than this (of consecutive processes): the pair sd is sqrt(2) x the processes' sd,
# which spends every process's degree of freedom (2-6 processes for the decode depths)
MIN_PAIRS = 5
# demo: its A/A-like neutral evaluation on a 2-core machine (no witness fixture: none used)
DEMO_NEUTRAL = DATA / "comments" / "demo-neutral.results.json"
# GPU run 53Q (an H100): Qwen3.6's run alone on the 40-layer file, an A/A of 2 pairs, no witnesses
QWEN36_FULL_AA = DATA / "sparkinfer" / "q53-h100" / "qwen36-full-aa.results.json"


@dataclass(frozen=True)
class RunPace:
    """One run's sample process on main: its wall time and the rates it prints."""

    seconds: float  # mean wall time, start to exit
    jitter_s: float  # sd of one process's wall time about it
    rates: dict[str, float]  # "metric@ctx" -> mean tok/s
    noise: dict[str, float]  # "metric@ctx" -> per-process sd of the log rate
    source: str  # the fixture, or "assumed: why"

    @property
    def assumed(self) -> bool:
        return self.source.startswith(ASSUMED)

    def note(self) -> str:
        return "pace assumed" if self.assumed else f"from {self.source}"


@dataclass(frozen=True)
class WitnessPace:
    """One witness process on main, by its own clock and start to exit."""

    seconds: float  # mean, by the witness's clock (a handoff clock leaves the load out)
    wall_s: float  # mean, start to exit: the box time it costs
    load_s: float  # the part of wall_s outside its cells' work (the model load): no head's
    pair_sd_s: float  # sd of a pair's difference of `seconds` (A/A)
    wall_jitter_s: float  # sd of wall_s - seconds of one process (the load's own)
    source: str
    # the part of `seconds` no engine change moves: the tool's own work per step (the argmax,
    # the handoff) beyond its cells' work at main's printed rates (0: not known apart)
    fixed_s: float = 0.0

    @property
    def assumed(self) -> bool:
        return self.source.startswith(ASSUMED)

    def note(self) -> str:
        return "pace assumed" if self.assumed else f"from {self.source}"


def run_pace(profile: str, model: str, ctxs: Iterable[int]) -> RunPace:
    """The sample process of the run of `model` over `ctxs` in the shipped `profile`."""
    ctxs = frozenset(ctxs)
    if profile == "llamacpp":
        return _results_run(LLAMACPP_AA, model)
    if profile == "sparkinfer" and model == "qwythos-9b":
        return _sweep_run(ctxs)
    if profile == "sparkinfer":
        return _measured_qwen36()
    if profile == "demo":
        return _results_run(DEMO_NEUTRAL, model)
    raise KeyError(f"no fixture or assumption for {profile}/{model}")


def witness_pace(profile: str, model: str, spec: WitnessSpec) -> WitnessPace:
    """The witness `spec` of `model`'s run in the shipped `profile`."""
    if profile == "llamacpp" and spec.name == LLAMACPP_H200_WITNESS:
        return _handoff_tsv(LLAMACPP_WITNESS, LLAMACPP_WITNESS_VARIANT)
    if profile == "llamacpp":
        return results_witness(LLAMACPP_H100_AA, spec.name, LLAMACPP_H100_MAIN)
    if profile == "sparkinfer":
        shape = ToolRun.of(spec)
        if model == "qwythos-9b":
            return _qwythos_witness(spec.name, shape)
        return _assumed_qwen36_witness(shape)
    raise KeyError(f"no witness fixture or assumption for {profile}/{spec.name}")


@cache
def _results_run(path: Path, model: str) -> RunPace:
    """A results file's kept samples of `model`: every side is main's in an A/A."""
    doc = json.loads(path.read_text())
    cells = [c for c in doc["cells"] if c["model"] == model and c["samples"]]
    kept = [s for s in cells[0]["samples"] if not s["dropped"]]
    walls = [float(s["wall_s"]) for s in kept]
    rates, noise = {}, {}
    for c in cells:
        key = f"{c['metric']}@{c['ctx']}"
        pairs = _pairs((s["pair"], s["side"], s["value"]) for s in c["samples"] if not s["dropped"])
        rates[key] = float(np.mean([v for p in pairs for v in p]))
        noise[key] = _per_process_sd(pairs)
    return RunPace(float(np.mean(walls)), float(np.std(walls, ddof=1)), rates, noise,
                   _rel(path))


@cache
def _sweep_rows() -> list[dict[str, Any]]:
    rows = [json.loads(ln) for ln in SPARK_SWEEPS.read_text().splitlines() if ln.strip()]
    # rounds "r1-a", "k131072-b": two builds of one commit; "slow-b" is another head: left out
    return [r for r in rows if not r["name"].startswith("slow")]


@cache
def _sweep_run(ctxs: frozenset[int]) -> RunPace:
    """The rounds that swept exactly these contexts; a cell's noise from its rounds' a/b pairs
    (a single round has none of its own: the other rounds' largest is taken)."""
    rows = [r for r in _sweep_rows() if {int(k) for k in r["r"]} == ctxs]
    if not rows:
        raise KeyError(f"no recorded sweep over {sorted(ctxs)}")
    walls = [float(r["wall"]) for r in rows]
    rates, noise = {}, {}
    for ctx in sorted(ctxs):
        for metric, field in (("decode", "decode_tps"), ("prefill", "prefill_pp")):
            pairs = _pairs((r["name"].split("-")[0], r["name"].split("-")[1], r["r"][str(ctx)][field])
                           for r in rows)
            rates[f"{metric}@{ctx}"] = float(np.mean([v for p in pairs for v in p]))
            noise[f"{metric}@{ctx}"] = _per_process_sd(pairs)
    if any(math.isnan(v) for v in noise.values()):
        fallback = max(_sweep_run(QWYTHOS_SWEEP).noise.values())
        noise = {k: fallback if math.isnan(v) else v for k, v in noise.items()}
    jitter = float(np.std(walls, ddof=1)) if len(walls) > 1 else 0.0
    return RunPace(float(np.mean(walls)), jitter, rates, noise, _rel(SPARK_SWEEPS))


QWYTHOS_SWEEP = frozenset({128, 4096, 32768, 65536})


@dataclass(frozen=True)
class ToolRun:
    """What one process of sparkinfer's witness tool does (its argv, engine/sparkinfer/witness.cpp):
    `prefill P N [--warm-prompt=W]` fills P ids (warm-up: W, default P, and N steps) then N
    steps; `decode D N` fills to depth D and runs 8 warm-up steps before READY, then 1 + N."""

    mode: str  # "prefill" or "decode"
    size: int  # the prompt P, or the depth D
    steps: int
    warm: int  # the warm-up's prefill (prefill mode) or untimed fill (decode mode), in ids

    @classmethod
    def of(cls, spec: WitnessSpec) -> ToolRun:
        mode, size = spec.argv[1], int(spec.argv[3])
        warm = next((int(a.split("=", 1)[1]) for a in spec.argv if a.startswith("--warm-prompt=")),
                    size)
        return cls(mode, size, spec.steps, warm)


@cache
def _tool_rows(model: str) -> dict[str, list[dict[str, Any]]]:
    """The witness tool's H200 processes of one model, by witness name, in the file's order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for ln in SPARK_WITNESS.read_text().splitlines():
        row = json.loads(ln) if ln.strip() else {}
        if row.get("model") == model:
            out.setdefault(row["witness"], []).append(row)
    return out


def _measured(rows: list[dict[str, Any]], source: str) -> WitnessPace:
    """Means of the processes; a pair's sd from consecutive processes as the harness pairs them
    (a slow drift cancels), or sqrt(2) x the processes' sd where they make too few pairs."""
    clock = np.array([float(r["handoff_s"]) for r in rows])
    wall = np.array([float(r["wall_s"]) for r in rows])
    diffs = clock[0:len(clock) - 1:2] - clock[1::2]
    pair_sd = float(np.std(diffs, ddof=1)) if len(diffs) >= MIN_PAIRS else \
        math.sqrt(2) * float(np.std(clock, ddof=1))
    return WitnessPace(float(clock.mean()), float(wall.mean()), float((wall - clock).mean()),
                       pair_sd, float(np.std(wall - clock, ddof=1)), source)


def _qwythos_witness(name: str, shape: ToolRun) -> WitnessPace:
    """The tool's measured processes of this very witness; a prefill witness no process measured
    is prefill-4096's, its prompt at the sweep fixture's rate of its own context (assumed)."""
    rows = _tool_rows(SPARK_QWYTHOS)
    if name in rows:
        return _measured(rows[name], _rel(SPARK_WITNESS))
    if shape.mode != "prefill" or shape.steps != 32:
        raise KeyError(f"no measured or derivable Qwythos witness pace for {name}")
    return _derived_prefill(shape)


@cache
def _derived_prefill(shape: ToolRun) -> WitnessPace:
    """prefill-4096's measured process with its prompt replaced: the timed work is P ids at the
    sweep's prefill rate at P plus prefill-4096's measured rest (its 32 steps); the load is
    prefill-4096's with its 4096-id warm-up replaced by W ids at the rate of the smallest swept
    context >= W (a warm-up above 8192 runs the kernels of the long contexts, witness.cpp). The
    first prefill of its size, which the timed one pays, was never measured: left out. A pair's
    sd keeps prefill-4096's relative one."""
    rows = _tool_rows(SPARK_QWYTHOS)["prefill-4096"]
    base = _measured(rows, _rel(SPARK_WITNESS))
    prompt_s = float(np.mean([float(r["prompt_s"]) for r in rows]))
    rates = _sweep_run(QWYTHOS_SWEEP).rates

    def fill_s(ids: int) -> float:
        ctx = min((c for c in QWYTHOS_SWEEP if c >= ids), default=max(QWYTHOS_SWEEP))
        return ids / rates[f"prefill@{ctx}"]

    seconds = base.seconds - prompt_s + fill_s(shape.size)
    load = base.load_s - prompt_s + fill_s(shape.warm)
    why = (f"{ASSUMED}: prefill-4096 of {_rel(SPARK_WITNESS)} with a {shape.size}-id prompt at "
           f"the sweep's rate")
    return WitnessPace(seconds, seconds + load, load, base.pair_sd_s * seconds / base.seconds,
                       base.wall_jitter_s, why)


@cache
def _handoff_tsv(path: Path, variant: str) -> WitnessPace:
    rows = [r for r in csv.DictReader(path.open(), delimiter="\t") if r["variant"] == variant]
    pairs = _pairs((r["pair"], r["side"], float(r["handoff_s"])) for r in rows)
    clock = [float(r["handoff_s"]) for r in rows]
    wall = [float(r["wall_s"]) for r in rows]
    load = [w - c for w, c in zip(wall, clock, strict=True)]
    return WitnessPace(float(np.mean(clock)), float(np.mean(wall)), float(np.mean(load)),
                       float(np.std([a - b for a, b in pairs], ddof=1)),
                       float(np.std(load, ddof=1)), _rel(path))


@cache
def results_witness(path: Path, name: str, rates_from: Path) -> WitnessPace:
    """The witness `name` of an A/A's results (both sides main): its verified processes' means,
    a pair's sd as the harness pairs them (the sd of the pairs' savings), and its fixed part:
    its span less its cells' tokens at main's printed rates of `rates_from` (the same box)."""
    doc = json.loads(path.read_text())
    w = next((w for w in doc["witnesses"] if w["name"] == name and w["source"] == "witness"), None)
    if w is None:
        raise KeyError(f"no witness {name} in {_rel(path)}")
    kept = [s for s in w["samples"] if s.get("verified") and not s["dropped"]]
    clock = np.array([float(s["seconds"]) for s in kept])
    load = np.array([float(s["wall_s"]) for s in kept]) - clock
    d = pair_savings(w["samples"], need_verified=True)
    rates = _main_rates(rates_from)
    work = sum(tokens / rates[key] for key, tokens in w["cells"].items())
    return WitnessPace(float(clock.mean()), float(clock.mean() + load.mean()), float(load.mean()),
                       float(np.std(d, ddof=1)), float(np.std(load, ddof=1)),
                       f"{_rel(path)} (fixed part: {_rel(rates_from)}'s rates)",
                       max(float(clock.mean()) - work, 0.0))


@cache
def _main_rates(path: Path) -> dict[str, float]:
    """Cell key -> main's mean printed rate in a results file (its base side)."""
    doc = json.loads(path.read_text())
    return {f"{c['model']}/{c['metric']}@{c['ctx']}":
            float(np.mean([s["value"] for s in c["samples"]
                           if s["side"] == "base" and not s["dropped"]]))
            for c in doc["cells"]}


# The 4-layer synthetic model sweeps in 2.0 s; scaled by layer, the shipped 40-layer sweep (53,888
# tokens of fill) was estimated at ~470 tok/s of prefill and ~440 of decode (docs/gpu-e2e.md).
# GPU run 53Q measured the sweep since (_measured_qwen36: 121.2 s a process, prefill 456-494,
# decode 432-459 tok/s); the witnesses' scaling below keeps these estimates (the 40-layer file's
# witnesses were never timed).
QWEN36_RATES = {"decode": 440.0, "prefill": 470.0}


@cache
def _measured_qwen36() -> RunPace:
    """GPU run 53Q's A/A of the run on the 40-layer file (an H100, 2 pairs): each cell's mean
    rate; one process's noise of its log rate, pooled over the cells of a metric (1 df a cell:
    prefill 4 df, decode 3); the jitter, the sd of a process's time outside its printed work."""
    doc = json.loads(QWEN36_FULL_AA.read_text())
    [samples] = [w for w in doc["witnesses"] if w["source"] == "samples"]
    rates, spread, work = {}, {}, {}
    for c in doc["cells"]:
        key = f"{c['metric']}@{c['ctx']}"
        tokens = int(samples["cells"][f"{c['model']}/{key}"])
        rates[key] = float(np.mean([s["value"] for s in c["samples"]]))
        pairs = _pairs((s["pair"], s["side"], s["value"]) for s in c["samples"])
        ratios = np.array([math.log(b / a) for a, b in pairs])
        spread.setdefault(c["metric"], []).append(ratios - ratios.mean())
        for s in c["samples"]:
            work[s["pair"], s["side"]] = work.get((s["pair"], s["side"]), 0.0) + tokens / s["value"]
    noise = {m: math.sqrt(sum(float((x ** 2).sum()) for x in xs) / sum(len(x) - 1 for x in xs) / 2)
             for m, xs in spread.items()}
    walls = {(s["pair"], s["side"]): float(s["seconds"]) for s in samples["samples"]}
    outside = [walls[k] - work[k] for k in walls]
    return RunPace(float(np.mean(list(walls.values()))), float(np.std(outside, ddof=1)), rates,
                   noise, _rel(QWEN36_FULL_AA))


# The 4-layer synthetic file's own sweep rates (docs/gpu-e2e.md, at 128 ids): with QWEN36_RATES,
# the factor by which each kind of step is taken to slow down at 40 layers.
QWEN36_4LAYER_RATES = {"decode": 2715.0, "prefill": 4698.0}
QWEN36_WITNESS_WHY = (f"{ASSUMED}: the tool on the 4-layer synthetic file "
                      f"({SPARK_WITNESS.name}) scaled to 40 layers as the sweep is")


@cache
def _assumed_qwen36_witness(shape: ToolRun) -> WitnessPace:
    """The tool on the real file: the 4-layer file's measured fill (token fill: no batched
    prefill for qwen35moe) and step times, each scaled as the sweep's rates are; its load the
    Qwythos tool's measured one (the 19 GB file's was never measured) plus the warm-up at 40
    layers (prefill mode: W ids and N steps; decode mode: the fill to D and 8 steps). A pair's
    sd keeps the 4-layer processes' relative one."""
    synth = _tool_rows(SPARK_QWEN36_SYNTH)["prefill-4096"]
    small = _measured(synth, _rel(SPARK_WITNESS))
    prompt_s = float(np.mean([float(r["prompt_s"]) for r in synth]))
    fill = prompt_s / int(synth[0]["a"]) * QWEN36_4LAYER_RATES["prefill"] / QWEN36_RATES["prefill"]
    step = (small.seconds - prompt_s) / int(synth[0]["n"]) * \
        QWEN36_4LAYER_RATES["decode"] / QWEN36_RATES["decode"]
    if shape.mode == "prefill":
        seconds = shape.size * fill + shape.steps * step
        warm = shape.warm * fill + shape.steps * step
    else:  # the prompt is one id, a step at depth D
        seconds = (1 + shape.steps) * step
        warm = shape.size * fill + 8 * step
    load = _measured(_tool_rows(SPARK_QWYTHOS)["decode-128"], "").load_s + warm
    return WitnessPace(seconds, seconds + load, load, small.pair_sd_s * seconds / small.seconds,
                       small.wall_jitter_s, QWEN36_WITNESS_WHY)



def _pairs(rows: Iterable[tuple[Any, str, Any]]) -> list[tuple[float, float]]:
    """(first side's value, second side's) per pair id, pairs with both sides only; sides are
    base/head or a/b."""
    by: dict[Any, dict[str, float]] = {}
    for pair, side, value in rows:
        by.setdefault(pair, {})[side] = float(value)
    return [(p.get("base", p.get("a", math.nan)), p.get("head", p.get("b", math.nan)))
            for p in by.values() if len(p) == 2]


def _per_process_sd(pairs: list[tuple[float, float]]) -> float:
    """sd of one process's log rate, from its pairs' log-ratios (a slow drift of the box that
    both processes of a pair share cancels): sd(log b - log a) / sqrt(2)."""
    if len(pairs) < 2:
        return math.nan
    return float(np.std([math.log(b / a) for a, b in pairs], ddof=1)) / math.sqrt(2)


def _rel(path: Path) -> str:
    return str(path.relative_to(DATA.parents[1]))
