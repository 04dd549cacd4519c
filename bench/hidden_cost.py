"""Can a head that really slows a cell hide it behind main-like printed rates? Per profile.

Each evaluation is the real harness on the simulated box (bench/_simbox.py: the shipped profile's
job, the paces and noise of its fixtures under tests/data/) graded by the real grading, with the
unexplained-cost check (evalbot/grading/unexplained_cost.py, the profiles' `cost_floor`s).

Heads (issue 53; bench/_hiding_heads.py), on the first run's smallest and largest cell, or with
`--every-cell` on every cell of every run (another run's cells named with their model):
  hide S on CELL      CELL's work really takes S x main's time; its bench prints main's rate
                      (its rate x S: "scaled")
  hide S x0.95 on C   the same, printing 0.95 x main's rate
  hide S mix          every cell of the first run (`--every-cell`: of each run; at the tier
                      step, those a witness times) slowed by S, printed scaled on half of them
                      and x0.95 on the rest
  hide S offset on C  (`--every-cell`, a cell no witness times) C slowed by S, printed scaled,
                      every other cell of its run printed 1% slower than it runs (main's speed)
  A/A, honest +5%     the false flags: an evaluation with any cell held for time unaccounted
  honest -1%          for or not believed unchanged (CAPPED); -1%: every cell slower within
                      the tolerance and printed so, nearer to the witness margin than an A/A
S: 2 (2x), the smallest tier step (the policy's; the demo's tier gate) and the regression
threshold t (the profile's tolerance, else the policy's 2%), at which the target is detection
>= 95%: the slowed cell regressed or not believed, and the headline no better than
eval:inconclusive; likewise at the tier step where it is the witness margin (the construction's
>= 95% at the margin itself). False flags: <= 0.1% per PR.

Designs: A, the samples' two-sided check (evalbot/grading/unexplained_cost.py; the witnesses time
the improved cells only); B, every witness times every covered cell that is not regressed
(`speed.witness_every_cell`), and an unchanged one is believed only where its witness rules out
a slowdown of the job's witness margin (the profile's `speed.witness_margin`: sparkinfer's and
llamacpp's the smallest tier step; else t) at the printed-rate rule's equivalence level
(evalbot/grading/confirmation.py `both_ways`). "@S": with a `speed.witness_share` of S. Box
time (`--box N`): per design, the mean seconds of N evaluations of the A/A, the honest head and a
head hiding t on the first run's largest cell, measuring and witnesses. The demo's witnesses have
no fixture: their pair sd is the profile's floor (bench/_simbox.py `_demo_witness`).

Noise (`--noise`): the fixtures' (the H200's), or the H100's that GPU run 53 measured (53L for
llamacpp: bench/_h100_noise.py), with the box's calibrated witness floors (`h100`, as `evalbot
calibrate` stores them) or the profile's (`h100-uncalibrated`); `h200-calibrated`: the fixtures'
noise with the box's calibrated floors; `h100-host2[-uncalibrated]` (llamacpp): 53L's second H100,
its witnesses 2.5-10 times noisier than 53L's floors. llamacpp's depth witnesses
(decode-0, prefill-4096-at-4096) were timed on 53L's H100 only: at every noise their pace and
noise are that A/A's (bench/_paces.py).

Variants of design B (`--unsized`, `--rule2`, `--flat-room`, `--margin M`): the rule before its
last looks were sized, witness rule 2's alpha split, the profile's share not grown with the looks,
another witness margin (0.02: sparkinfer's before profile v8). `--splits`: per
witness, the alpha split over the looks (bench/_alpha_split.py).

`--profiles` takes shipped names, YAML files (an older version: `git show
REV:evalbot/profiles/NAME.yaml > FILE`) and `sparkinfer-witnessed`, sparkinfer with the cells
profile v9 no longer grades put back on witnesses of their own (bench/_witness_ungraded.py).

Usage: python bench/hidden_cost.py [--sims 300] [--aa-sims N] [--profiles sparkinfer,llamacpp]
       [--designs A,B,B@1.5] [--only NAME[,NAME]] [--every-cell] [--jobs N] [--box 0]
       [--noise h100] [--splits]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from statistics import NormalDist

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _alpha_split, _h100_noise, _simbox  # noqa: E402
from bench._hiding_heads import heads, load, world  # noqa: E402
from bench._simbox import Head  # noqa: E402
from evalbot.engine.contract.shared.witness_interval import Floor  # noqa: E402
from evalbot.engine.measure import witness_plan  # noqa: E402
from evalbot.evaluation import jobspec  # noqa: E402
from evalbot.evaluation.profile import Profile  # noqa: E402
from evalbot.grading import witness_sizing  # noqa: E402
from evalbot.grading.confirmation import WITNESS_RULE  # noqa: E402
from evalbot.grading.unexplained_cost import CAPPED  # noqa: E402

CAUGHT = ("regressed", "unconfirmed", "spoofed")
NO_BETTER = ("inconclusive", "regressed", "spoofed", "incorrect")
DETECT_TARGET, FALSE_TARGET = 0.95, 0.001


def label(name: str) -> str:
    """A profile's name in the tables; a file's with its version."""
    profile = load(name)
    return name if profile.name == name else f"{profile.name} v{profile.version}"


MARGIN: list[float] = []  # `--margin`, set in each process by use_variant


def profile_of(name: str, every: bool, share: float = 0.0) -> Profile:
    """The shipped profile; `every`: design B, its witnesses timing every covered cell;
    `share`: another `speed.witness_share` (0: the shipped one); `--margin`: another
    `speed.witness_margin`."""
    profile = load(name)
    speed = replace(profile.speed, witness_every_cell=every)
    speed = replace(speed, witness_margin=MARGIN[-1]) if MARGIN else speed
    return replace(profile, speed=replace(speed, witness_share=share) if share else speed)


def design_of(label: str) -> tuple[bool, float]:
    """"A": the profile without `witness_every_cell`; "B": with it; "@S" after either: with a
    `speed.witness_share` of S (else the profile's)."""
    kind, _, share = label.partition("@")
    if kind not in ("A", "B"):
        raise SystemExit(f"--designs: {label!r} is not A, B, A@SHARE or B@SHARE")
    return kind == "B", float(share or 0.0)


def chunk(name: str, design: str, head: Head, sims: int, seed: int,
          box: str = "", variant: str = "") -> tuple[int, int, int]:
    """(evaluations, caught, flagged) of `sims` evaluations of one head on `box`
    (bench/_h100_noise.py BOXES)."""
    use_variant(variant)
    evaluator = _simbox.Evaluator(profile_of(name, *design_of(design)), world(name, box),
                                  Path(tempfile.mkdtemp(prefix="hidden-")))
    rng, caught, flagged = np.random.default_rng(seed), 0, 0
    with _simbox.seeded_prompts(seed):
        for _ in range(sims):
            o = evaluator.evaluate(head, rng)
            decisions = {k: d for k, d, _ in o.cells}
            caught += all(decisions.get(k) in CAUGHT for k in head.real if k in decisions) \
                and o.kind in NO_BETTER
            flagged += any(c in CAPPED for _, _, c in o.cells)
    return sims, caught, flagged


def box_seconds(name: str, design: str, head: Head, sims: int, seed: int,
                box: str = "", variant: str = "") -> tuple[float, float]:
    """(measuring with warm-ups, witnesses): mean seconds of `sims` evaluations of `head`."""
    use_variant(variant)
    evaluator = _simbox.Evaluator(profile_of(name, *design_of(design)), world(name, box),
                                  Path(tempfile.mkdtemp(prefix="hidden-")))
    rng, measured, witnessed = np.random.default_rng(seed), 0.0, 0.0
    with _simbox.seeded_prompts(seed):
        for _ in range(sims):
            o = evaluator.evaluate(head, rng)
            measured, witnessed = measured + o.measure_s, witnessed + o.witness_s
    return measured / sims, witnessed / sims


VARIANTS = {"unsized": "last looks unsized", "rule2": "witness rule 2 (the n^2 split)",
            "flat-room": "the profile's share (room not grown)"}
MARGIN_VARIANT = "margin="  # + M: the profiles' witness_margin M (0.02: before sparkinfer v8)


def use_variant(variant: str) -> None:
    """In this process, the shipped rule but for `variant`: "unsized", the rule before
    witness_sizing, every last look at BOTH_WAYS_LAST_LOOK x the profile's (its cap at 0:
    `last_look` returns that multiple); "rule2", the sized looks judged at witness rule 2's
    split (n^2, before profile version 7); "flat-room", the profile's witness_share whatever
    the sized looks; "margin=M", every profile's witness_margin M."""
    if variant == "unsized":
        witness_sizing.MAX_LAST_LOOK = 0
    elif variant == "rule2":
        jobspec.BOTH_WAYS_RULE = WITNESS_RULE  # type: ignore[misc]
    elif variant == "flat-room":
        witness_sizing.room_share = lambda share, *_: share  # type: ignore[assignment]
    elif variant.startswith(MARGIN_VARIANT):
        MARGIN.append(float(variant[len(MARGIN_VARIANT):]))


def print_box(names: list[str], designs: list[str], sims: int, jobs: int, box: str,
              variant: str) -> None:
    """Per profile and design, the box time of an A/A (neutral), an honest tier and a head
    hiding the threshold slowdown on its first run's largest cell."""
    print("\n### box time per verdict kind (seconds: measuring with warm-ups + witnesses; "
          f"{sims} evaluations a row)\n\n| profile | head | design | measuring | witnesses | "
          "total |\n|---|---|---|---:|---:|---:|")
    rows = []
    for name in names:
        every = heads(load(name))
        picked = [h for h in every if h.name.startswith(("A/A", "honest"))] + \
            [h for h in every if h.name.startswith("hide threshold") and "x0.95" not in h.name
             and "mix" not in h.name][-1:]
        rows += [(name, head, design) for head in picked for design in designs]
    with ProcessPoolExecutor(jobs) as pool:
        futures = [pool.submit(box_seconds, name, design, head, sims, 1, box, variant)
                   for name, head, design in rows]
        for (name, head, design), fut in zip(rows, futures, strict=True):
            m, w = fut.result()
            print(f"| {label(name)} | {head.name} | {design} | {m:.0f} | {w:.0f} | {m + w:.0f} |",
                  flush=True)


def print_analytic(name: str, share: float, box: str = "") -> None:
    """Per witness of the profile under design B, the chance that an A/A's unchanged cell is not
    ruled in at its last look, at the pair sd of the simulated box (`box`), judged with the floor
    the job carries: a normal approximation (the critical value the job's last equivalence t)
    and the look's own test (evalbot/grading/witness_sizing.py `miss`: the pairs' sd pooled with
    the floor or refuting it); their sum over the PR: the false-flag rate the rule's
    construction gives, box-time cuts aside (the simulated A/As count those)."""
    evaluator = _simbox.Evaluator(profile_of(name, True, share), world(name, box),
                                  Path(tempfile.mkdtemp(prefix="hidden-")))
    rule = evaluator.job.rule
    print(f"\n### {label(name)}, {box or 'H200'} noise: an A/A not believed at a witness's last look\n"
          "\n| witness | cell | margin x main's s | pair sd | floor | last look | P normal | P |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|")
    total = approx = 0.0
    for run in evaluator.job.runs:
        pace, cells = evaluator.world.run(run), {c.key: c for c in run.cells}
        for spec in run.witnesses:
            sd = evaluator.world.witness(run, spec).pair_sd_s
            t_last = (spec.pooled_equivalence_t or spec.equivalence_t)[-1]
            n = spec.looks[-1]
            for key, tokens in spec.cells.items():
                if witness_plan.timed_by_narrower(key, spec, run.witnesses):
                    continue
                delta = rule.margin * tokens / _simbox.rate(pace, cells[key])
                p_normal = NormalDist().cdf(t_last - delta * math.sqrt(n) / sd)
                p = witness_sizing.miss(n, spec.looks, Floor(spec.sd_floor_s, spec.floor_df),
                                        delta, spec.rule_version, sd)
                total, approx = total + p, approx + p_normal
                print(f"| {spec.name} | {key} | {delta:.4f} | {sd:.4f} | {spec.sd_floor_s:.4f} "
                      f"| {n} | {p_normal:.1e} | {p:.1e} |")
    print(f"\nsum over the PR: {total:.1e} (normal approximation {approx:.1e})")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=300, help="evaluations per hiding head")
    ap.add_argument("--aa-sims", type=int, default=0, help="per A/A and honest row (default 10x)")
    ap.add_argument("--profiles", default="sparkinfer,llamacpp", help="shipped names or YAML "
                    "files (an older version of one: its fixtures are its name's)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--box", type=int, default=0, help="A/A evaluations per design (box time)")
    ap.add_argument("--designs", default="A,B", help="A: without `speed.witness_every_cell`; "
                    "B: with it; A@S, B@S: with a `speed.witness_share` of S")
    ap.add_argument("--only", default="", help="the heads whose name contains this (any of "
                    "several, comma-separated)")
    ap.add_argument("--every-cell", action="store_true", help="a hiding head on each cell of "
                    "every run (default: the first run's smallest and largest by main's work)")
    ap.add_argument("--noise", default="", choices=_h100_noise.BOXES,
                    help="the witnesses' noise: the fixtures' (H200, default; h200-calibrated: "
                    "with the box's calibrated floors), the H100's of GPU run 53 (53L for "
                    "llamacpp) with the box's calibrated floors (h100) or the profile's "
                    "(h100-uncalibrated); llamacpp's second H100 of run 53L (h100-host2, "
                    "h100-host2-uncalibrated): bench/_h100_noise.py")
    ap.add_argument("--unsized", action="store_const", const="unsized", dest="variant",
                    default="", help="the rule before its last looks were sized from the "
                    "floor (evalbot/grading/witness_sizing.py)")
    ap.add_argument("--rule2", action="store_const", const="rule2", dest="variant",
                    help="the sized looks at witness rule 2's alpha split (n^2)")
    ap.add_argument("--flat-room", action="store_const", const="flat-room", dest="variant",
                    help="the profile's witness_share, not grown with the sized looks")
    ap.add_argument("--margin", type=lambda v: f"{MARGIN_VARIANT}{float(v):g}", dest="variant",
                    help="another `speed.witness_margin` for every profile (0.02: sparkinfer's "
                    "threshold, the rule before profile v8)")
    ap.add_argument("--analytic", type=float, default=None, metavar="SHARE",
                    help="print design B's analytic false-flag bound at this witness_share")
    ap.add_argument("--splits", action="store_true", help="per witness of design B, the alpha "
                    "split over its looks: sized last look, A/A pairs and box time, detection "
                    "(bench/_alpha_split.py)")
    a = ap.parse_args(argv)
    started = time.time()
    if a.splits:
        for name in a.profiles.split(","):
            evaluator = _simbox.Evaluator(profile_of(name, True), world(name, a.noise),
                                          Path(tempfile.mkdtemp(prefix="hidden-")))
            print(f"\n### {label(name)}, {a.noise or 'H200'} noise: the alpha split over the looks")
            _alpha_split.print_splits(evaluator, sum(len(w.cells) for r in evaluator.job.runs
                                                     for w in r.witnesses))
    designs = a.designs.split(",")
    use_variant(a.variant)
    if a.analytic is not None:
        for name in a.profiles.split(","):
            print_analytic(name, a.analytic, a.noise)
    if a.box:
        print_box(a.profiles.split(","), designs, a.box, a.jobs, a.noise, a.variant)
    for name in a.profiles.split(",") if a.sims else ():
        for design in designs:
            print_rows(name, design, a)
    print(f"\n({time.time() - started:.0f} s)")


def print_rows(name: str, design: str, a: argparse.Namespace) -> None:
    """One table: every head of the profile under one design."""
    profile = load(name)
    rows = [h for h in heads(profile, a.every_cell) if picked(h, a.only)]
    tasks = []
    for i, head in enumerate(rows):
        n = a.sims if head.name.startswith("hide") else (a.aa_sims or 10 * a.sims)
        for start in range(0, n, 50):
            seed = zlib.crc32(f"{profile.name}|{head.name}|{start}".encode())
            tasks.append((i, (name, design, head, min(50, n - start), seed, a.noise,
                              a.variant)))
    totals = [[0, 0, 0] for _ in rows]
    with ProcessPoolExecutor(a.jobs) as pool:
        for i, fut in [(i, pool.submit(chunk, *args)) for i, args in tasks]:
            for j, v in enumerate(fut.result()):
                totals[i][j] += v
    every, share = design_of(design)
    what = ("B: every witness times every covered cell" if every else
            "A: the samples' two-sided check") + (f", witness_share {share:g}" if share else "")
    print(f"\n### {label(name)}, measured pace, {a.noise or 'H200'} noise"
          f"{', ' + VARIANTS.get(a.variant, a.variant) if a.variant else ''}, design {what}\n\n"
          "| head | n | caught | flagged | target |\n|---|---:|---:|---:|---|")
    for head, (n, caught, flagged) in zip(rows, totals, strict=True):
        print(f"| {head.name} | {n} | {100 * caught / n:.1f}% | {100 * flagged / n:.2f}% | "
              f"{_target(head, n, caught, flagged)} |", flush=True)


def picked(head: Head, only: str) -> bool:
    """`--only`: the heads whose name contains any of its comma-separated parts."""
    return any(part in head.name for part in only.split(","))


def _target(head: Head, n: int, caught: int, flagged: int) -> str:
    if not head.name.startswith("hide"):
        return f"flagged <= 0.1%: {'holds' if flagged <= FALSE_TARGET * n else 'FAILS'}"
    if head.name.startswith(("hide threshold", "hide tier step")):
        return f"caught >= 95%: {'holds' if caught >= DETECT_TARGET * n else 'FAILS'}"
    return "never unchanged: " + ("holds" if caught == n else "FAILS")


if __name__ == "__main__":
    main()
