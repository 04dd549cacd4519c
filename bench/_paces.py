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

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
ASSUMED = "assumed"
# llamacpp: the shipped profile's own A/A on the H200 (42 pairs of the exact argv, both sides
# main) and the A/A of its shipped witness on the handoff clock (25 pairs, flash attention off)
LLAMACPP_AA = DATA / "llamacpp" / "h200-aa.results.json"
LLAMACPP_WITNESS = DATA / "llamacpp" / "h200-witness-aa.tsv"
LLAMACPP_WITNESS_VARIANT = "nofa"  # the shipped tool (docs/gpu-e2e.md)
# sparkinfer: two builds of one commit swept alternately on the H200 (Qwythos-9B synthetic), and
# the same generate tool as a witness of 4096 prompt steps + 1024 new ids on that model
SPARK_SWEEPS = DATA / "sparkinfer" / "h200-alternating-sweeps.jsonl"
SPARK_GENERATE = DATA / "sparkinfer" / "phase2-speedup-h200.results.json"
SPARK_GENERATE_WITNESS = "prefill-4k-decode-1024"
# demo: its A/A-like neutral evaluation on a 2-core machine (no witness fixture: none used)
DEMO_NEUTRAL = DATA / "comments" / "demo-neutral.results.json"


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
        return _assumed_qwen36()
    if profile == "demo":
        return _results_run(DEMO_NEUTRAL, model)
    raise KeyError(f"no fixture or assumption for {profile}/{model}")


def witness_pace(profile: str, model: str, name: str, steps: int) -> WitnessPace:
    """The witness `name` of `model`'s run, `steps` tokens of work a process (its cells')."""
    if profile == "llamacpp":
        return _handoff_tsv(LLAMACPP_WITNESS, LLAMACPP_WITNESS_VARIANT)
    if profile == "sparkinfer" and model == "qwythos-9b":
        return _generate_scaled(steps)
    if profile == "sparkinfer":
        return _assumed_qwen36_witness(steps)
    raise KeyError(f"no witness fixture or assumption for {profile}/{name}")


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
        fallback = max(_sweep_run(frozenset({128, 4096, 32768, 65536})).noise.values())
        noise = {k: fallback if math.isnan(v) else v for k, v in noise.items()}
    jitter = float(np.std(walls, ddof=1)) if len(walls) > 1 else 0.0
    return RunPace(float(np.mean(walls)), jitter, rates, noise, _rel(SPARK_SWEEPS))


def sweep_fixed_s() -> float:
    """What a Qwythos sweep spends outside the work its rates time (the model load, start-up):
    its wall time less ctx / prefill + 128 / decode over its contexts."""
    run = _sweep_run(frozenset({128, 4096, 32768, 65536}))
    work = sum((int(k.split("@")[1]) if k.startswith("prefill") else 128) / rate
               for k, rate in run.rates.items())
    return run.seconds - work


@cache
def _generate_scaled(steps: int) -> WitnessPace:
    """The generate tool on Qwythos: one step per id (prompt and output alike), measured on
    4096 + 1024 steps; a process of `steps` is the model load (the sweep's, the same loader)
    plus that many steps at the measured step time. A wall clock: seconds are the wall."""
    doc = json.loads(SPARK_GENERATE.read_text())
    w = next(w for w in doc["witnesses"] if w["name"] == SPARK_GENERATE_WITNESS)
    base = [float(s["seconds"]) for s in w["samples"] if s["side"] == "base" and not s["dropped"]]
    load = sweep_fixed_s()
    step_s = (float(np.mean(base)) - load) / sum(w["cells"].values())
    pairs = _pairs((s["pair"], s["side"], s["seconds"]) for s in w["samples"] if not s["dropped"])
    pair_sd = float(np.std([b - h for b, h in pairs], ddof=1))
    seconds = load + steps * step_s
    return WitnessPace(seconds, seconds, load, pair_sd, 0.0, _rel(SPARK_GENERATE))


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


# The real Qwen3.6-35B-A3B file was never measured: its 4-layer synthetic model sweeps in 2.0 s;
# scaled by layer, the shipped 40-layer sweep (53,888 tokens of fill at ~470 tok/s) is about two
# minutes, decode ~440 tok/s (docs/gpu-e2e.md, an estimate). The noise is Qwythos's.
QWEN36_SWEEP_S = 120.0
QWEN36_RATES = {"decode": 440.0, "prefill": 470.0}
QWEN36_WHY = f"{ASSUMED}: the 4-layer synthetic file's sweep scaled to 40 layers (docs/gpu-e2e.md)"


def _assumed_qwen36() -> RunPace:
    qwythos = _sweep_run(frozenset({128, 4096, 32768, 65536}))
    sd = max(qwythos.noise.values())
    return RunPace(QWEN36_SWEEP_S, qwythos.jitter_s, dict(QWEN36_RATES), {"decode": sd,
                   "prefill": sd}, QWEN36_WHY)


def _assumed_qwen36_witness(steps: int) -> WitnessPace:
    """The generate tool on the real file: the Qwythos load, each step at the assumed decode."""
    qwythos = _generate_scaled(1)
    seconds = sweep_fixed_s() + steps / QWEN36_RATES["decode"]
    return WitnessPace(seconds, seconds, sweep_fixed_s(), qwythos.pair_sd_s, 0.0, QWEN36_WHY)


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
