"""How often does an honest A/A's wall clock fail to rule its unwitnessed cells in, and how many
pairs does it take? Per run of a shipped profile that has such cells, by the rule's arithmetic on
many drawn A/As: too rare for whole simulated evaluations (bench/hidden_cost.py) to show 0.1%.

An A/A's printed rates are its processes' true rates (bench/_simbox.py), so a pair's unaccounted
time u is the two processes' difference outside the work (the run's jitter, sd sqrt(2) x jitter);
a cell printed slower on the mean of the pairs (each process's work drawn with the cell's
per-process noise) buys no cover (engine/contract/shared/wall_clock.py): its per-pair difference joins
u, and its rule floor times main's seconds for it widens the run's floor. At each look of
the rule (2, 5, 8 pairs) the bound of
`cost_interval` at the equivalence level (`cost_critical`, the run's `cost_floor` pooled, or the
pairs' own sd where they refute it) must lie below the witness margin of each unwitnessed cell's
work; the harness measures on to the next look while it does not, unless a cell's mean cost
is already past its margin (engine/measure/speed.py `_on_to`, wall_clock.measure_on). A run
not ruled in where it stops is a false flag. `--check N` judges N draws with
the real functions as well and counts disagreements: the harness's `measure_on` at each look up
to the draw's stop, the grader's `pair_costs`, `uncovered` and `judge_cost` at it.

Usage: python bench/wall_clock_aa.py [--draws 1000000] [--noise h100] [--check 2000]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _simbox  # noqa: E402
from evalbot.engine.contract.shared import wall_clock  # noqa: E402
from evalbot.engine.contract.shared.stats import pooled_sd  # noqa: E402
from evalbot.engine.contract.shared.witness_interval import Floor  # noqa: E402
from evalbot.grading.unexplained_cost import cost_critical, judge_cost  # noqa: E402


def draws(run, world, n: int, pairs: int, rng):  # type: ignore[no-untyped-def]
    """(u per draw and pair, {cell: (base work, head work) per draw and pair}) of n A/As."""
    pace = world.run(run)
    u = rng.normal(0.0, math.sqrt(2) * pace.jitter_s, (n, pairs))
    work = {}
    for c in run.cells:
        key = f"{run.model}/{c.metric}@{c.ctx}"
        cell = _simbox.Cell(run.model, c.metric, c.ctx)
        tokens = c.ctx if c.metric == "prefill" else run.decode_tokens
        main_s = tokens / _simbox.rate(pace, cell)
        sd = _simbox.noise(pace, cell)
        work[key] = tuple(main_s * np.exp(-rng.normal(0.0, sd, (n, pairs))) for _ in range(2))
    return u, work


def judged(run, u, work, unwitnessed, margin, looks, cell_floor):  # type: ignore[no-untyped-def]
    """Per draw: the pairs the run measured, and whether its cells were ruled in at the end. A
    draw stops at a look where they are ruled in, or where one is not and its mean cost is
    already past its margin (wall_clock.measure_on: more pairs would not rule it in)."""
    floor = Floor(run.cost_floor_s, run.cost_floor_df)
    n_draws = u.shape[0]
    stopped = np.full(n_draws, looks[-1])
    ruled = np.zeros(n_draws, dtype=bool)
    going = np.ones(n_draws, dtype=bool)
    for n in looks:
        crit = cost_critical(n, floor)
        uncovered, extra = u[:, :n].copy(), np.zeros(n_draws)
        main = {k: np.exp(np.log(b[:, :n]).mean(axis=1)) for k, (b, _) in work.items()}
        for k, (b, h) in work.items():
            slower = (h[:, :n] - b[:, :n]).mean(axis=1) > 0
            uncovered += np.where(slower[:, None], h[:, :n] - b[:, :n], 0.0)
            extra += np.where(slower, (cell_floor * main[k]) ** 2, 0.0)
        widened = np.sqrt(floor.sd_s ** 2 + extra)
        own = uncovered.std(axis=1, ddof=1)
        sd, is_own = pooled_sd(own, widened, n - 1, floor.df, crit.guard)
        t = np.where(is_own | (crit.lower_pooled <= 0), crit.lower, crit.lower_pooled)
        mean = uncovered.mean(axis=1)
        hi = mean + t * sd / math.sqrt(n)
        now = np.all([hi < margin * main[k] for k in unwitnessed], axis=0) & going
        # a mean past a margin leaves that cell's bound past it too: unruled, and more pairs
        # would not rule it in
        past = np.any([mean >= margin * main[k] for k in unwitnessed], axis=0) & going & ~now
        stopped[now | past] = n
        ruled |= now
        going &= ~(now | past)
    return stopped, ruled


def check(run, u, work, unwitnessed, margin, stopped, ruled, cell_floor, looks):  # type: ignore[no-untyped-def]
    """Disagreements with the real functions: at each draw's stop, the grader's bound; at each
    look up to it (the rule's last aside), the harness's choice to measure on or stop."""
    floor, floors = Floor(run.cost_floor_s, run.cost_floor_df), dict.fromkeys(work, cell_floor)
    bad = 0
    for i in range(u.shape[0]):
        stop = int(stopped[i])
        for n in [n for n in looks if n <= stop and n < looks[-1]]:
            witness, records = _docs(u, work, i, n)
            bad += wall_clock.measure_on(witness, records, unwitnessed, cost_critical(n, floor),
                                         floor, margin, floors) != (n < stop)
        witness, records = _docs(u, work, i, stop)
        cost = judge_cost(wall_clock.pair_costs(witness, records), floor, 0.001,
                          wall_clock.uncovered(witness, records, floor, floors))
        real = cost is not None and all(
            wall_clock.rules_in(cost["cost_hi_s"], records[k], 1, margin) for k in unwitnessed)
        bad += real != bool(ruled[i])
    return bad


def _docs(u, work, i, n):  # type: ignore[no-untyped-def]
    """Draw i's first n pairs as a samples witness and its cells' records."""
    records = {k: {"higher_is_better": True, "samples": [
        {"pair": p, "side": side, "value": 1.0 / work[k][j][i, p], "dropped": False}
        for p in range(n) for j, side in enumerate(("base", "head"))]} for k in work}
    witness = {"cells": dict.fromkeys(work, 1), "samples": [
        {"pair": p, "side": side, "seconds": 100.0 + sum(work[k][j][i, p] for k in work)
         + (u[i, p] if side == "head" else 0.0), "dropped": False}
        for p in range(n) for j, side in enumerate(("base", "head"))]}
    return witness, records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draws", type=int, default=1_000_000)
    ap.add_argument("--noise", default="")
    ap.add_argument("--check", type=int, default=0)
    ap.add_argument("--seed", type=int, default=53)
    a = ap.parse_args()
    profile, world = _simbox.shipped("sparkinfer"), _simbox.World("sparkinfer", box=a.noise)
    looks, margin = list(profile.speed.looks), profile.speed.witness_margin
    cell_floor = profile.speed.sd_floor  # the rule's, every cell's here (no per-cell floor)
    rng = np.random.default_rng(a.seed)
    print(f"\n### sparkinfer, {a.noise or 'H200'} noise: an A/A's wall clock, {a.draws:,} draws a run\n"
          "\n| run | unwitnessed cells | floor | pairs: " + " / ".join(map(str, looks))
          + " | not ruled in | mean pairs | checked |\n|---|---|---:|---:|---:|---:|---:|")
    for run in profile.runs:
        timed = {k for w in run.witnesses for k in w.cells}
        unwitnessed = [f"{run.model}/{c.metric}@{c.ctx}" for c in run.cells
                       if f"{run.model}/{c.metric}@{c.ctx}" not in timed]
        if not unwitnessed or not run.cost_floor_df:
            continue
        u, work = draws(run, world, a.draws, looks[-1], rng)
        stopped, ruled = judged(run, u, work, unwitnessed, margin, looks, cell_floor)
        shares = " / ".join(f"{100 * np.mean(stopped == n):.3f}%" for n in looks)
        k = min(a.check, a.draws)
        bad = check(run, u[:k], {c: (b[:k], h[:k]) for c, (b, h) in work.items()}, unwitnessed,
                    margin, stopped[:k], ruled[:k], cell_floor, looks) if k else 0
        print(f"| {run.model} ({len(run.cells)} cells) | {', '.join(c.split('/')[1] for c in unwitnessed)} "
              f"| {run.cost_floor_s} s, {run.cost_floor_df} df | {shares} "
              f"| {100 * np.mean(~ruled):.4f}% | {stopped.mean():.3f} "
              f"| {f'{bad} of {k} differ' if k else '-'} |")


if __name__ == "__main__":
    main()
