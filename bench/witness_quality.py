"""Does a witness confirm a head that saves nothing on a box noisier than its floor, and does it
still confirm an honest gain? Every shipped witness, under the witnesses' rule of new jobs and
the rule before it (issue 46).

Each evaluation is the real witness measurement (engine.measure.witness.measure: ABBA pairs, its
looks, the harness's stop at the bot's per-look values, engine/contract/shared/witness_interval.py
`saving_interval` with engine/contract/shared/stats.py `pooled_sd`) on simulated processes, then the
bot's judgement of the record (evalbot.grading.confirmation.judge, with its `critical` and
evalbot/grading/sequential.py `guard`). The witnesses are the shipped profiles' as
evalbot.evaluation.jobspec.make_job builds them under the `default` policy: floors and their
degrees of freedom, looks, critical values, alpha. Every pair is measured (no box-time cut).

Processes (bench/_witness_rows.py): main's time is the witness's measured one (bench/_paces.py,
"pace assumed" where no fixture exists); a pair's saving has sd k x the witness's floor, k = 1
(the calibrated noise), 2 and 3 (a box that has grown noisier since its floor was measured).
Heads, per covered cell:
  no saving   its printed rates claim the cell is 2% faster (the least an improved cell claims;
              a larger claim is contradicted sooner); its witness work is main's
  honest     really faster in the cell by a tier's lower edge (XS 2%, S 3.5%, M 6%, L 10%,
              XL 18%; prefill: the time-to-first-token reduction), and claims just that; 1x only
Bars, for the first rule of `--rules`: no saving confirmed in <= 1% (the 95% upper bound <= 1.5%)
at 1x, 2x and 3x; an honest gain at a tier's lower edge still confirmed in >= 95% wherever a
rule after it in `--rules` (the rule before) reached 95%. An edge no rule reaches is the
witness's limit (its noise against its pairs), not the rule's: the table shows it, and marks
with · the gains that even a known sd with all of alpha at the last look would confirm in
under 95%.

Second table: how soon the stale-floor test (evalbot.grading.witness_floor) calls a box k x as
noisy as a witness's floor stale from the jobs' own main pairs, per floor's degrees of freedom
(`--sims` / 4 boxes a row).

Usage: python bench/witness_quality.py [--sims 1200] [--profiles llamacpp,sparkinfer,demo]
       [--rules 2,1] [--seed 1]
At 4,000 evaluations a row, both rules, every profile: 55 minutes on 2 busy cores.
`--sims 20` checks the table in seconds.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._witness_rows import (  # noqa: E402
    EDGES,
    NOISE,
    Counted,
    Row,
    WitnessCell,
    shipped_cells,
    simulate,
    stale_samples,
)
from evalbot.grading.confirmation import WITNESS_RULE  # noqa: E402
from evalbot.grading.witness_floor import WitnessRun, check, stale_names  # noqa: E402

BAR_FALSE, BAR_FALSE_HI, BAR_HONEST = 0.01, 0.015, 0.95
# the stale-floor table: floors of a few df (sparkinfer's assumed ones), of a 12-pair
# `evalbot calibrate`, of llamacpp's and sparkinfer prefill-4096's measured A/As
STALE_DF, STALE_JOBS, STALE_NOISE, STALE_PAIRS = (3, 11, 24, 46), (3, 5, 10), (1, 1.5, 2, 3), 5


def wilson(hits: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95% Wilson interval of a share."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(centre - half, 0.0), min(centre + half, 1.0)


def pct(c: Counted, interval: bool = False) -> str:
    text = f"{100 * c.share:.2f}" if interval else f"{100 * c.share:.1f}"
    if interval:
        text += f" (≤{100 * wilson(c.hits, c.n)[1]:.2f})"
    return text


def table(cells: list[WitnessCell], rules: list[int], sims: int, seed: int) -> list[str]:
    """One row per witness cell and rule; returns the bars' failures (module docstring)."""
    heads = " | ".join(f"{k}x" for k in NOISE) + " | " + " | ".join(EDGES)
    print(f"| witness | cell | floor s (df) | looks | main s | rule | no saving: {heads} "
          "| pairs at S |")
    print("|---|---|---|---|---|---|" + "---:|" * (len(NOISE) + len(EDGES) + 1))
    failures: list[str] = []
    for i, wc in enumerate(cells):
        rows = {rule: simulate(wc, rule, sims, seed + 1000 * i) for rule in rules}
        for rule, got in rows.items():
            main = "?" if wc.main_s is None else f"{wc.main_s:.3f}{' *' if wc.assumed else ''}"
            print(f"| {wc.witness} | {wc.cell} | {wc.floor_s:.4f} ({wc.floor_df}) | "
                  f"{list(wc.looks)} | {main} | {rule} | "
                  + " | ".join(pct(got.null[k], True) for k in NOISE) + " | "
                  + " | ".join(pct(got.honest[e]) + ("" if wc.visible(e) else " ·")
                               if e in got.honest else "-" for e in EDGES)
                  + (f" | {got.pairs_at_s:.1f} |" if got.honest else " | - |"))
        failures += _missed(wc, rows[rules[0]], [rows[r] for r in rules[1:]])
    return failures


def _missed(wc: WitnessCell, held: Row, before: list[Row]) -> list[str]:
    """The bars the held rule misses on this witness cell: a no-saving head confirmed in more
    than 1% (or its upper bound above 1.5%) at any noise; an honest edge under 95% that the
    rules before it reached (with none run beside it: any edge the witness can see, `visible`).
    An edge no rule reached is the witness's limit, not the rule's: the table shows it."""
    out = [f"{wc.name}: no saving confirmed in {pct(c, True)}% at {k}x"
           for k, c in held.null.items()
           if c.share > BAR_FALSE or wilson(c.hits, c.n)[1] > BAR_FALSE_HI]
    for edge, c in held.honest.items():
        reached = any(r.honest[edge].share >= BAR_HONEST for r in before) if before \
            else wc.visible(edge)
        if reached and c.share < BAR_HONEST:
            out.append(f"{wc.name}: an honest {edge} edge confirmed in {pct(c)}%")
    return out


def stale_table(sims: int, seed: int) -> None:
    """How soon the stale-floor test (evalbot.grading.witness_floor) sees a box k x as noisy as
    a witness's floor, from the jobs' own main pairs: the share of boxes called stale after J
    jobs of STALE_PAIRS pairs each, per floor's degrees of freedom."""
    rng = np.random.default_rng(seed)
    print(f"\nstale-floor test: boxes called stale (of {sims}) after J jobs of {STALE_PAIRS} "
          "pairs each (2 of main's pairs a job)\n")
    print("| floor df | J | " + " | ".join(f"{k}x" for k in STALE_NOISE) + " |")
    print("|---:|---:|" + "---:|" * len(STALE_NOISE))
    for df in STALE_DF:
        for jobs in STALE_JOBS:
            shares = []
            for k in STALE_NOISE:
                main = 1.0 + rng.normal(0.0, k * 0.01 / math.sqrt(2), (sims, jobs, STALE_PAIRS))
                called = sum(bool(stale_names(check(
                    [WitnessRun("w", 0.01, df, stale_samples(m), j) for j, m in enumerate(box)],
                    {}))) for box in main)
                shares.append(f"{100 * called / sims:.1f}")
            print(f"| {df} | {jobs} | " + " | ".join(shares) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=1200, help="evaluations per row and head")
    ap.add_argument("--profiles", default="llamacpp,sparkinfer,demo")
    ap.add_argument("--rules", default=f"{WITNESS_RULE},1",
                    help="witness rules, the first the one held to the bars")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rules = [int(r) for r in args.rules.split(",") if r]
    started = time.monotonic()
    cells = shipped_cells([p for p in args.profiles.split(",") if p])
    print(f"witness confirmation, {args.sims} evaluations a head and row; rules {rules} "
          f"(the first is held to the bars)\n")
    failures = table(cells, rules, args.sims, args.seed)
    print("\nno saving: the share confirmed (its 95% upper bound) with the box k x as noisy as "
          "the floor; XS..XL: an honest gain at the tier's lower edge, confirmed at 1x; "
          "pairs at S: mean pairs of that head at the S edge; * main's time assumed (no "
          "fixture), ? not known (no honest rows); · the gain is under the witness's noise at "
          "its last look (no rule can confirm it in 95%)")
    print(f"bars (rule {rules[0]}): " + ("all met" if not failures else
                                         "missed: " + "; ".join(failures)))
    stale_table(max(args.sims // 4, 10), args.seed)
    print(f"{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
