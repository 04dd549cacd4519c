"""Stress noise for the rule table of bench/verdict_quality.py (issue 33): what a box does that
the normal model leaves out, layered on a profile's measured noise.

  slow first   the first test of a process runs 10% slow in a third of the processes (as
               llama-bench did on the H200); it hits the run's first cell unless the profile
               throws the process's first tests away (its parse `discard_first`)
  throttle     5% of the processes run every cell 5% slow, unflagged
  t(3) tails   each process's deviations are Student t with 3 degrees of freedom (a normal
               scale mixture), scaled to the measured sd: rare large outliers
  drift        the box slows linearly across the run, a quarter of the per-process sd per
               process (ABBA cancels it over two pairs; the random walk stays as well)
  stale 2x     the box is twice as noisy as the floors the job carries were calibrated at
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from evalbot.engine.contract.job import SpeedRun

Noise = Callable[[np.random.Generator, int, int, int, SpeedRun], np.ndarray]
CELL_CORR, DRIFT_STEP = 0.5, 0.1
SLOW_SHARE, SLOW_FACTOR = 1 / 3, 0.9
THROTTLE_SHARE, THROTTLE_FACTOR = 0.05, 0.95
TAIL_DF = 3
DRIFT_PER_PROCESS = 0.25  # x the per-process sd


def normal(sigma: float) -> Noise:
    """Per-process deviations of sd `sigma`: cells of one process share half their variance; a
    slow random walk of the box (0.1 sigma per process) is shared by everything measured after
    it."""
    def draw(rng: np.random.Generator, sims: int, procs: int, _: int, run: SpeedRun) -> np.ndarray:
        cells = len(run.cells)
        shared = rng.standard_normal((sims, 1, procs))
        own = rng.standard_normal((sims, cells, procs))
        x = sigma * (math.sqrt(CELL_CORR) * shared + math.sqrt(1 - CELL_CORR) * own)
        return x + np.cumsum(DRIFT_STEP * sigma * rng.standard_normal((sims, 1, procs)), axis=2)
    return draw


def scaled(noise: Noise, factor: float) -> Noise:
    """The box `factor` times as noisy (the job's floors stay what they were)."""
    def draw(rng: np.random.Generator, sims: int, procs: int, i: int, run: SpeedRun) -> np.ndarray:
        return factor * noise(rng, sims, procs, i, run)
    return draw


def slow_first(noise: Noise) -> Noise:
    def draw(rng: np.random.Generator, sims: int, procs: int, i: int, run: SpeedRun) -> np.ndarray:
        x = noise(rng, sims, procs, i, run)
        if not run.parse.get("discard_first"):
            slow = rng.random((sims, procs)) < SLOW_SHARE
            x[:, 0, :] += np.where(slow, math.log(SLOW_FACTOR), 0.0)
        return x
    return draw


def throttle(noise: Noise) -> Noise:
    def draw(rng: np.random.Generator, sims: int, procs: int, i: int, run: SpeedRun) -> np.ndarray:
        x = noise(rng, sims, procs, i, run)
        slow = rng.random((sims, 1, procs)) < THROTTLE_SHARE
        return x + np.where(slow, math.log(THROTTLE_FACTOR), 0.0)
    return draw


def tails(noise: Noise, df: int = TAIL_DF) -> Noise:
    """Each process's deviations times 1 / sqrt(chi2_df / df), rescaled to the same sd: a normal
    process becomes Student t with df degrees of freedom (a scale mixture), shared by its cells."""
    def draw(rng: np.random.Generator, sims: int, procs: int, i: int, run: SpeedRun) -> np.ndarray:
        x = noise(rng, sims, procs, i, run)
        w = 1 / np.sqrt(rng.chisquare(df, (sims, 1, procs)) / df)
        return x * w / math.sqrt(df / (df - 2))
    return draw


def drift(noise: Noise, sigma: float) -> Noise:
    def draw(rng: np.random.Generator, sims: int, procs: int, i: int, run: SpeedRun) -> np.ndarray:
        x = noise(rng, sims, procs, i, run)
        return x - DRIFT_PER_PROCESS * sigma * np.arange(procs)
    return draw
