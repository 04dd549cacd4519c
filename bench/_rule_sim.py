"""The stopping rule on arrays of simulated PRs (bench/verdict_quality.py's `--rule` table).

What the harness does per run (engine/measure/speed.py), vectorised over PRs: warm-ups, then pairs
in ABBA order until every cell is final, the last look, the attempts' cap or the budget shared by
the runs (checked before each pair; counted in pairs where the profile says so,
StoppingRule.total_budget_s; each run keeps the time of its first verdict look at main's pace).
After each pair the run's process faults are screened again (engine/contract/shared/faults.py, rule
version 3: a pair with a faulted sample is dropped whole and measured again); a look fires when
the run's kept pairs reach its count and judges the first that many kept pairs with
`engine.contract.shared.stats.decide`, the run's cells testing their calibration together
(`stats.calibration_refuted`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench import _box_stages, _paces
from bench._scenarios import Scenario, changed_cell
from evalbot.engine.contract.job import Job, SpeedRun
from evalbot.engine.contract.shared import faults, stats


@dataclass
class Sim:
    final: np.ndarray  # (sims, cells) final codes over the whole job
    estimate: np.ndarray  # (sims,) what its tier is judged on (log-ratio) at its last look
    pairs: np.ndarray  # (sims, runs) pairs each run measured (attempts, dropped ones included)
    box_s: np.ndarray  # (sims,) box seconds of the warm-ups and the measuring
    target_pairs: np.ndarray | None = None  # (sims,) pairs of the changed cell's run


def pace_s(profile: str, run: SpeedRun, given: float | None = None) -> float:
    """Seconds per sample process of a run: `given`, else its fixture's (bench/_paces.py)."""
    return given or _paces.run_pace(profile, run.model, {c.ctx for c in run.cells}).seconds


def bounds_of(job: Job) -> list[stats.Bounds]:
    rule = job.rule
    zeros = [0.0] * len(rule.looks)
    return [stats.Bounds(n, c, cf, e, ef, q, qf, g, rule.pool_df) for n, c, cf, e, ef, q, qf, g
            in zip(rule.looks, rule.critical, rule.critical_floor, rule.equivalence,
                   rule.equivalence_floor, rule.settle or zeros, rule.settle_floor or zeros,
                   rule.guard or zeros, strict=True)]


def simulate(job: Job, sc: Scenario, effect: float, sims: int, rng: np.random.Generator,
             given: float | None = None, normal_share: float = 0.0) -> Sim:
    """`sims` PRs whose head is `effect` faster in the changed cell; in `normal_share` of its
    processes (a hostile head fast in some processes only) at main's speed instead."""
    rule, target = job.rule, changed_cell(job)
    bounds = bounds_of(job)
    cap = faults.attempts_cap(rule.looks[-1], rule.fault_sigmas)
    total = rule.total_budget_s(pace_s(sc.profile, job.runs[0], given))  # main's pace scales it
    verdict = min((b.pairs for b in bounds if b.directional_floor >= 0), default=rule.looks[-1])
    elapsed = np.zeros(sims)  # what the budget is charged: warm-ups and kept pairs
    box = np.zeros(sims)  # what the box spent: every pair measured
    finals, used, estimate = [], [], np.zeros(sims)
    target_pairs = np.zeros(sims)
    for index, run in enumerate(job.runs):
        pace = pace_s(sc.profile, run, given)
        x = sc.noise(rng, sims, 2 * cap, index, run)
        first, second = x[..., 0::2], x[..., 1::2]
        even = np.arange(cap) % 2 == 0  # ABBA: base first in even pairs
        base, head = np.where(even, first, second), np.where(even, second, first)
        keys = [c.key for c in run.cells]
        if target in keys and effect:
            fast = rng.random((sims, cap)) >= normal_share if normal_share else True
            head[:, keys.index(target), :] += np.where(fast, math.log1p(effect), 0.0)
        warmups = _box_stages.warmups_s(rule.warmup, pace)
        room = np.maximum((total - elapsed - warmups) / _box_stages.pairs_s(1, pace), verdict)
        pairs_max = np.clip(np.floor(room) + 1, 0, cap).astype(int)
        final, n_used, n_kept, mean_at = run_rule(base, head, bounds, job, run, pairs_max)
        if target in keys:
            estimate = mean_at[:, keys.index(target)]
            target_pairs = n_used
        elapsed += warmups + _box_stages.pairs_s(n_kept, pace)
        box += warmups + _box_stages.pairs_s(n_used, pace)
        finals.append(final)
        used.append(n_used)
    return Sim(np.concatenate(finals, axis=1), estimate, np.stack(used, axis=1), box,
               target_pairs)


def run_rule(base: np.ndarray, head: np.ndarray, bounds: list[stats.Bounds], job: Job,
             run: SpeedRun, pairs_max: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Final code per (sim, cell), pairs the run measured (dropped ones included) and kept, each
    cell's mean at its last look. `base`, `head`: (sims, cells, attempts) log rates, higher is
    better; `pairs_max`: the kept pairs the budget lets the run begin (a dropped pair's time is
    not charged to it: engine/contract/rule.py total_budget_s)."""
    rule = job.rule
    sims, cells, cap = base.shape
    floors = np.array([rule.sd_floors.get(c.key, rule.sd_floor) for c in run.cells])
    edges = _edges(job, run)
    r = head - base
    state = _State(np.full((sims, cells), stats.UNDECIDED, dtype=np.int8),
                   np.zeros((sims, cells)), np.zeros((sims, cells), dtype=bool),
                   np.zeros((sims, cap), dtype=bool))
    decided = state.decided
    stop = np.full(sims, -1)  # the attempt a run stopped after
    used = np.zeros(sims, dtype=int)  # pairs measured, dropped ones included
    step = np.zeros(sims, dtype=int)  # the next look of each run
    judged = state.judged
    both = np.stack([base, head], axis=2)  # (sims, cells, 2, attempts)
    count = np.zeros(sims, dtype=int)
    for t in range(1, cap + 1):
        live = (stop < 0) & (count < pairs_max)
        if not live.any():
            break
        kept = np.ones((sims, t), dtype=bool)
        faulty = np.zeros(sims, dtype=bool)
        if rule.fault_sigmas > 0:
            drop, faulty[live] = faults.screened_pairs(both[live][..., :t], floors,
                                                       rule.fault_sigmas)
            kept[live] = ~drop
            # a neutral-only look whose pairs the screen has since dropped is void: taken again
            void = live & (judged[:, :t] & ~kept).any(axis=1)
            step[void] = np.where(judged[void].any(axis=1), _retake(step[void], bounds), 0)
            judged[void] = False
        count = np.where(live, kept.sum(axis=1), count)
        for k, b in enumerate(bounds):
            # a verdict waits for FAULTED_VERDICT_PAIRS pairs once a sample is faulted
            may = b.directional_floor < 0 or ~faulty | (t >= faults.FAULTED_VERDICT_PAIRS)
            rows = np.flatnonzero(live & (step == k) & (count >= b.pairs) & may)
            if rows.size:
                _look(rows, b, kept[rows], r[rows, :, :t], state, floors, rule, edges)
                step[rows] = k + 1
        done = live & (decided.all(axis=1) | (step >= len(bounds)))
        stop[done] = t
        used[live] = t
    return stats.final_codes(state.code), used, count, state.mean


@dataclass
class _State:
    """Per (sim, cell): the code of its last look, what its tier is judged on, whether it is
    decided; per (sim, pair): the pairs the run's last neutral-only look judged."""

    code: np.ndarray
    mean: np.ndarray
    decided: np.ndarray
    judged: np.ndarray


FINAL_CODES = [stats.DECISIONS.index(d) for d in stats.FINAL]


def _look(rows: np.ndarray, b: stats.Bounds, kept: np.ndarray, r: np.ndarray, state: _State,
          floors: np.ndarray, rule: Any, edges: np.ndarray | None) -> None:
    """Look `b` for the runs `rows`: the first b.pairs kept pairs of each (kept: (rows, t), r:
    (rows, cells, t))."""
    use = kept & (np.cumsum(kept, axis=1) <= b.pairs)
    rr = np.where(use[:, None, :], r, 0.0)
    n = b.pairs
    mean = rr.sum(axis=2) / n
    sd = np.sqrt(np.maximum((rr * rr).sum(axis=2) - n * mean * mean, 0.0) / (n - 1))
    refuted = (stats.calibration_refuted(sd, floors[None, :], n)[:, None] if b.pool_df
               else False)  # every cell of the run, decided or not, as the harness does
    code = stats.decide(mean, sd, b, floors[None, :], rule.significance, rule.tolerance,
                        edges, refuted)
    fresh = ~state.decided[rows]
    state.code[rows] = np.where(fresh, code, state.code[rows])
    # what grading tiers on: an unsettled tier at the end by its interval's lower end (v2)
    g = stats.half_widths(sd, n, b, floors[None, :], refuted)[2] if b.settle_floor < 0 else 0
    state.mean[rows] = np.where(fresh, np.where(code == stats.IMPROVING, mean - g, mean),
                                state.mean[rows])
    state.decided[rows] |= fresh & np.isin(code, FINAL_CODES)
    if b.directional_floor < 0:  # neutral only: void if the screen drops its pairs
        state.judged[rows] = False
        state.judged[rows, : use.shape[1]] = use


def _retake(step: np.ndarray, bounds: list[stats.Bounds]) -> np.ndarray:
    """The look to take again: the last neutral-only look before `step` (a look of fewer than
    the verdict pairs: the pairs it judged)."""
    neutral_only = [k for k, b in enumerate(bounds) if b.directional_floor < 0]
    return np.array([max((k for k in neutral_only if k < s), default=0) for s in step], dtype=int)


def _edges(job: Job, run: SpeedRun) -> np.ndarray | None:
    rows = [job.rule.tier_edges.get(c.key) for c in run.cells]
    if all(rows):
        return np.array(rows)
    if any(rows):  # mixed roles: a cell without tiers settles at once
        return np.array([e or [-1e9, 1e9] for e in rows])
    return None
