"""The demo's decode-1024 witness: pairs to an A/A's stop and to `faster`'s confirmation, by looks.

    python bench/demo_witness_looks.py [--trials 3000]

For the shipped profile's decode-1024 witness and a few other floors and looks, each as the job
carries it (evalbot/evaluation/jobspec.py `make_job`: the sized last look, rule 3's critical
values), a Monte Carlo of pairs drawn at a pair sd: an A/A stops at the first look whose
equivalence bound rules out a slowdown of 30% of the witness's work (`work_s`), `faster` at the
first whose confirmation bound puts its saving (0.5 s a pair) above the prefill's claim (0.1 s),
the sd the bound uses pooled with the floor where the F guard lets it, as
engine/contract/shared/witness_interval.py does. Rows: the mean pairs at the stop and the share that
never stopped. The other covered cells' claims and unverified work are left out.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evalbot.config.settings import BoxConfig  # noqa: E402
from evalbot.engine.contract.witness_spec import WitnessSpec  # noqa: E402
from evalbot.evaluation.jobspec import make_job  # noqa: E402
from evalbot.evaluation.profile import load_profile  # noqa: E402
from evalbot.grading.policy import load_labels  # noqa: E402

WITNESS = "decode-1024"
SAVING_S, CLAIMS_S = 0.5, 0.1  # `faster`'s saving a pair, and the prefill's claimed part of it
DESIGNS = {"shipped": {}, "floor 0.12, looks 3 6 16": {"sd_floor_s": 0.12, "looks": (3, 6, 16)},
           "floor 0.12, looks 4 8 16": {"sd_floor_s": 0.12, "looks": (4, 8, 16)}}
SDS = (0.06, 0.2, 0.25)  # a pair's sd: quiet, the suite beside busy loops, noisier


def spec_of(change: dict[str, object]) -> WitnessSpec:
    profile = load_profile("demo")
    [run] = profile.runs
    looks = change.get("looks")
    witnesses = [replace(w, **change, **({"pairs": looks[-1]} if isinstance(looks, tuple) else {}))
                 if w.name == WITNESS else w for w in run.witnesses]
    profile = replace(profile, runs=[replace(run, witnesses=witnesses)])
    policy = load_labels(ROOT / "labels.yaml").policy("default")
    box = BoxConfig(name="bench", kind="local", workdir="/nonexistent", repo="/nonexistent")
    job = make_job(profile, policy, box, "a" * 40, "b" * 40)
    return next(w for r in job.runs for w in r.witnesses if w.name == WITNESS)


def bound(spec: WitnessSpec, i: int, pairs: np.ndarray, own_t: tuple[float, ...],
          pooled_t: tuple[float, ...]) -> float:
    """The look's critical value times the sd it uses, over the root of its pairs."""
    n, s, f = len(pairs), float(np.std(pairs, ddof=1)), spec.sd_floor_s
    if f > 0 and spec.guard and pooled_t and s * s <= spec.guard[i] * f * f:
        counted = spec.pooled_df[i]
        used = pooled_t[i] * math.sqrt((counted * f * f + (n - 1) * s * s) / (counted + n - 1))
    else:
        used = own_t[i] * s
    return used / math.sqrt(n)


def stops(spec: WitnessSpec, aa: bool, sd: float, trials: int) -> np.ndarray:
    """Pairs at each trial's stop (-1: none)."""
    rng = np.random.default_rng(7)
    delta = 0.3 * spec.work_s
    out = np.full(trials, -1)
    for t, d in enumerate(rng.normal(0.0 if aa else SAVING_S, sd, (trials, spec.looks[-1]))):
        for i, n in enumerate(spec.looks):
            x = d[:n]
            if aa and -x.mean() + bound(spec, i, x, spec.equivalence_t,
                                        spec.pooled_equivalence_t) < delta:
                out[t] = n
                break
            if not aa and x.mean() - bound(spec, i, x, spec.stop_t, spec.pooled_stop_t) > CLAIMS_S:
                out[t] = n
                break
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3000)
    args = parser.parse_args()
    print(f"{WITNESS}: mean pairs at the stop (share that never stopped), {args.trials} trials")
    print("| design | looks | floor (s) | pair sd (s) | A/A | faster |\n|---|---|---|---|---|---|")
    for name, change in DESIGNS.items():
        spec = spec_of(change)
        for sd in SDS:
            cols = []
            for aa in (True, False):
                st = stops(spec, aa, sd, args.trials)
                cols.append(f"{st[st > 0].mean() if (st > 0).any() else 0:.1f} "
                            f"({(st < 0).mean():.1%})")
            print(f"| {name} | {' '.join(map(str, spec.looks))} | {spec.sd_floor_s} | {sd} | "
                  f"{' | '.join(cols)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
