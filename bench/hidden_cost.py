"""Can a head that really slows a cell hide it behind main-like printed rates? Per profile.

Each evaluation is the real harness on the simulated box (bench/_simbox.py: the shipped profile's
job, the paces and noise of its fixtures under tests/data/) graded by the real grading, with the
unexplained-cost check (evalbot/grading/unexplained_cost.py, the profiles' `cost_floor`s).

Heads (issue 53):
  hide S on CELL      CELL's work really takes S x main's time; its bench prints main's rate
                      (its rate x S: "scaled")
  hide S x0.95 on C   the same, printing 0.95 x main's rate
  hide S mix          every tiered cell of the first run slowed by S, printed scaled on half of
                      them and x0.95 on the rest
  A/A, honest +5%     the false flags: an evaluation whose unexplained-cost check flagged a run
S: 2 (2x), the policy's smallest tier step (XS 2%) and its regression threshold (t = 2%), at
which the target is detection >= 95%: the slowed cell regressed or not believed, and the headline
no better than eval:inconclusive. False flags: <= 0.1% per PR.

Designs: A, as shipped (the samples' two-sided check; the witnesses time the improved cells
only); B, every witness times every covered cell that is not regressed, judged both ways
(`speed.witness_every_cell`). Box time (`--box N`): per design, the mean seconds of N
evaluations of the A/A, the honest head and a hiding head, measuring and witnesses.

Usage: python bench/hidden_cost.py [--sims 300] [--profiles sparkinfer,llamacpp] [--jobs N]
       [--box 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _simbox  # noqa: E402
from bench._simbox import POLICY, Head, World  # noqa: E402
from evalbot.evaluation.profile import Profile, load_profile  # noqa: E402
from evalbot.grading.unexplained_cost import CAPPED  # noqa: E402

CAUGHT = ("regressed", "unconfirmed", "spoofed")
NO_BETTER = ("inconclusive", "regressed", "spoofed", "incorrect")
DETECT_TARGET, FALSE_TARGET = 0.95, 0.001


def slowdowns() -> dict[str, float]:
    step = min(b - a for a, b in zip(sorted(POLICY.tiers.values()),
                                     sorted(POLICY.tiers.values())[1:], strict=False))
    smallest = min(POLICY.tiers.values())
    return {"2x": 2.0, f"tier step {100 * min(step, smallest):g}%": 1 + min(step, smallest),
            f"threshold {100 * POLICY.tolerance:g}%": 1 / (1 - POLICY.tolerance)}


def heads(profile: Profile) -> list[Head]:
    """The hiding heads on the first run's smallest and largest cell (by main's work), a mix on
    all of its cells, then the A/A and an honest +5% on every cell."""
    world = World(profile.name)
    run = profile.runs[0]
    pace = world.run(run)
    work = {f"{run.model}/{c.metric}@{c.ctx}":
            (c.ctx if c.metric == "prefill" else run.decode_tokens) / _rate(pace, c)
            for c in run.cells}
    ordered = sorted(work, key=work.__getitem__)
    out = []
    for label, s in slowdowns().items():
        for key in (ordered[0], ordered[-1]):
            short = key.split("/", 1)[1]
            out.append(Head(f"hide {label} on {short}", real={key: 1 / s}, printed={key: s},
                            honest=False))
            out.append(Head(f"hide {label} x0.95 on {short}", real={key: 1 / s},
                            printed={key: 0.95 * s}, honest=False))
        out.append(Head(f"hide {label} mix", real={k: 1 / s for k in ordered},
                        printed={k: s * (1.0 if i % 2 else 0.95) for i, k in enumerate(ordered)},
                        honest=False))
    keys = [f"{r.model}/{c.metric}@{c.ctx}" for r in profile.runs for c in r.cells]
    out.append(Head("A/A", honest=False))
    out.append(Head("honest +5% every cell", real={k: 1.05 for k in keys}))
    return out


def _rate(pace: object, cell: object) -> float:
    rates = pace.rates  # type: ignore[attr-defined]
    return float(rates.get(f"{cell.metric}@{cell.ctx}") or rates[cell.metric])  # type: ignore[attr-defined]


def profile_of(name: str, every: bool) -> Profile:
    """The shipped profile; `every`: design B, its witnesses timing every covered cell."""
    profile = load_profile(name)
    return replace(profile, speed=replace(profile.speed, witness_every_cell=every))


def chunk(name: str, every: bool, head: Head, sims: int, seed: int) -> tuple[int, int, int]:
    """(evaluations, caught, flagged) of `sims` evaluations of one head."""
    profile = profile_of(name, every)
    evaluator = _simbox.Evaluator(profile, World(name), Path(tempfile.mkdtemp(prefix="hidden-")))
    rng, caught, flagged = np.random.default_rng(seed), 0, 0
    with _simbox.seeded_prompts(seed):
        for _ in range(sims):
            o = evaluator.evaluate(head, rng)
            decisions = {k: d for k, d, _ in o.cells}
            caught += all(decisions.get(k) in CAUGHT for k in head.real if k in decisions) \
                and o.kind in NO_BETTER
            flagged += any(c in CAPPED for _, _, c in o.cells)
    return sims, caught, flagged


def box_seconds(name: str, every: bool, head: Head, sims: int, seed: int) -> tuple[float, float]:
    """(measuring with warm-ups, witnesses): mean seconds of `sims` evaluations of `head`."""
    evaluator = _simbox.Evaluator(profile_of(name, every), World(name),
                                  Path(tempfile.mkdtemp(prefix="hidden-")))
    rng, measured, witnessed = np.random.default_rng(seed), 0.0, 0.0
    with _simbox.seeded_prompts(seed):
        for _ in range(sims):
            o = evaluator.evaluate(head, rng)
            measured, witnessed = measured + o.measure_s, witnessed + o.witness_s
    return measured / sims, witnessed / sims


def print_box(names: list[str], sims: int) -> None:
    """Per profile and design, the box time of an A/A (neutral), an honest tier and a head
    hiding the threshold slowdown on its first run's largest cell."""
    print("\n### box time per verdict kind (seconds: measuring with warm-ups + witnesses; "
          f"{sims} evaluations a row)\n\n| profile | head | design | measuring | witnesses | "
          "total |\n|---|---|---|---:|---:|---:|")
    for name in names:
        rows = heads(load_profile(name))
        picked = [h for h in rows if h.name in ("A/A", "honest +5% every cell")] + \
            [h for h in rows if h.name.startswith("hide threshold") and "x0.95" not in h.name
             and "mix" not in h.name][-1:]
        for head in picked:
            for design, every in (("A", False), ("B", True)):
                m, w = box_seconds(name, every, head, sims, 1)
                print(f"| {name} | {head.name} | {design} | {m:.0f} | {w:.0f} | {m + w:.0f} |",
                      flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=300, help="evaluations per hiding head")
    ap.add_argument("--aa-sims", type=int, default=0, help="per A/A and honest row (default 10x)")
    ap.add_argument("--profiles", default="sparkinfer,llamacpp")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--box", type=int, default=0, help="A/A evaluations per design (box time)")
    ap.add_argument("--designs", default="A,B", help="A: as shipped; B: every witness timing "
                    "every covered cell (`speed.witness_every_cell`)")
    a = ap.parse_args(argv)
    started = time.time()
    if a.box:
        print_box(a.profiles.split(","), a.box)
    for name in a.profiles.split(",") if a.sims else ():
        for design in a.designs.split(","):
            print_rows(name, design == "B", a)
    print(f"\n({time.time() - started:.0f} s)")


def print_rows(name: str, every: bool, a: argparse.Namespace) -> None:
    """One table: every head of the profile under one design."""
    rows = heads(load_profile(name))
    tasks = []
    for i, head in enumerate(rows):
        n = a.sims if head.name.startswith("hide") else (a.aa_sims or 10 * a.sims)
        for start in range(0, n, 50):
            seed = zlib.crc32(f"{name}|{head.name}|{start}".encode())
            tasks.append((i, (name, every, head, min(50, n - start), seed)))
    totals = [[0, 0, 0] for _ in rows]
    with ProcessPoolExecutor(a.jobs) as pool:
        for i, fut in [(i, pool.submit(chunk, *args)) for i, args in tasks]:
            for j, v in enumerate(fut.result()):
                totals[i][j] += v
    design = "B: every witness times every covered cell" if every else "A: as shipped"
    print(f"\n### {name}, measured pace, design {design}\n\n"
          "| head | n | caught | flagged | target |\n|---|---:|---:|---:|---|")
    for head, (n, caught, flagged) in zip(rows, totals, strict=True):
        print(f"| {head.name} | {n} | {100 * caught / n:.1f}% | {100 * flagged / n:.2f}% | "
              f"{_target(head, n, caught, flagged)} |", flush=True)


def _target(head: Head, n: int, caught: int, flagged: int) -> str:
    if not head.name.startswith("hide"):
        return f"flagged <= 0.1%: {'holds' if flagged <= FALSE_TARGET * n else 'FAILS'}"
    if head.name.startswith("hide threshold"):
        return f"caught >= 95%: {'holds' if caught >= DETECT_TARGET * n else 'FAILS'}"
    return "never unchanged: " + ("holds" if caught == n else "FAILS")


if __name__ == "__main__":
    main()
