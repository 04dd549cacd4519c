"""The real harness and grading under the box's faults (issue 46): what verdicts come of a box whose
processes a slow first test or a silent throttle slows.

    python bench/fault_quality.py [--sims 300] [--aa-sims 1000] [--profiles sparkinfer,llamacpp]
                                  [--seed 1]

Each evaluation is the real harness (engine.measure.speed.Measurement: warm-ups, ABBA pairs, the
fault screen of rule version 3, looks, the budget, the witnesses) on bench/_simbox.py's simulated
box at the profile's measured paces and noise, graded by the real grading. The faults
(bench/_simbox.py World.fault, bench/_stress.py's stresses): "slow first", the first test of a
process 10% slow in a third of the processes (llama-bench on the H200, docs/gpu-e2e.md; thrown
away where the profile's parse discards the first tests); "throttle", every cell of 5% of the
processes 5% slow, unflagged. Both sides and the warm-ups alike.

Heads: the A/A, and the first model's decode cells faster by 3% and 5% (its true tier XS, S).
Columns: the share of PRs per verdict (neutral, a tier, inconclusive, REJECT, other) with a 95%
Clopper-Pearson interval on the row's target (A/A: inconclusive <= 5% and wrong <= 1%; a head:
tiered >= 95%), and the mean box minutes of the measuring and the witnesses.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
from scipy.stats import beta

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _simbox  # noqa: E402
from bench._simbox import Head  # noqa: E402
from evalbot.evaluation.profile import load_profile  # noqa: E402

FAULTS = ("", "slow first", "throttle")


def heads(profile: str) -> list[Head]:
    model = load_profile(profile).models[0].name
    decode = [f"{model}/decode@{c.ctx}" for r in load_profile(profile).runs if r.model == model
              for c in r.cells if c.metric == "decode"]
    return [_simbox.Head("A/A", honest=False)] + [
        Head(f"{model} decode +{100 * g:.0f}%", real={k: 1 + g for k in decode},
             true_tier=_simbox.true_tier("decode", g)) for g in (0.03, 0.05)]


def row(profile: str, fault: str, head: Head, n: int, seed: int) -> str:
    world = _simbox.World(profile, None, fault)
    evaluator = _simbox.Evaluator(load_profile(profile), world,
                                  Path(tempfile.mkdtemp(prefix="faults-")))
    rng = np.random.default_rng(seed)
    kinds: Counter[str] = Counter()
    box_s = 0.0
    with _simbox.seeded_prompts(seed):
        for _ in range(n):
            out = evaluator.evaluate(head, rng)
            kinds[_kind(out)] += 1
            box_s += out.measure_s + out.witness_s
    aa = head.name == "A/A"
    hits = kinds["tier"] if not aa else kinds["inconclusive"]
    wrong = n - kinds["neutral"] - kinds["inconclusive"] if aa else kinds["REJECT"]
    target = (f"inconclusive {_share(hits, n)} [<= {_upper(hits, n)}], wrong "
              f"{_share(wrong, n)} [<= {_upper(wrong, n)}]" if aa else
              f"tiered {_share(hits, n)} [>= {_lower(hits, n)}]")
    shares = " / ".join(_share(kinds[k], n) for k in ("neutral", "tier", "inconclusive",
                                                      "REJECT", "other"))
    return (f"| {profile} | {fault or 'none'} | {head.name} | {n} | {shares} | {target} | "
            f"{box_s / n / 60:.1f} |")


def _kind(out: _simbox.Outcome) -> str:
    if out.kind == "improved" and out.tier:
        return "tier"
    if out.kind in ("neutral", "inconclusive"):
        return out.kind
    if out.kind in ("regressed", "spoofed", "incorrect", "crashed", "timeout"):
        return "REJECT"
    return "other"


def _share(k: int, n: int) -> str:
    return f"{100 * k / max(n, 1):.1f}%"


def _upper(k: int, n: int) -> str:
    return "100%" if k >= n else f"{100 * beta.ppf(0.975, k + 1, n - k):.1f}%"


def _lower(k: int, n: int) -> str:
    return "0%" if k <= 0 else f"{100 * beta.ppf(0.025, k, n - k + 1):.1f}%"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=300, help="evaluations per head row")
    ap.add_argument("--aa-sims", type=int, default=1000, help="evaluations per A/A row")
    ap.add_argument("--profiles", default="sparkinfer,llamacpp")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    started = time.monotonic()
    print("| profile | fault | head | PRs | neutral / tier / inconclusive / REJECT / other | "
          "target, 95% interval | box min |\n|---|---|---|---:|---|---|---:|")
    for profile in (p for p in args.profiles.split(",") if p):
        for fault in FAULTS:
            for head in heads(profile):
                n = args.aa_sims if head.name == "A/A" else args.sims
                print(row(profile, fault, head, n, args.seed), flush=True)
    print(f"\n({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
