"""Process faults the GPU state does not flag, screened out of a run's pairs (rule version 3).

A fault of the box slows a whole process, or one test of it, by far more than the noise between
processes: llama-bench on the H200 ran its first test ~10% slow in a third of the processes
(docs/gpu-e2e.md), and a throttle that nvidia-smi does not report slows every cell of a process.
Each such pair shifts a cell's log-ratio by the fault, so a few of them inflate the cell's sd
until no look can call it neutral or settle a tier (a sparkinfer A/A: inconclusive in 97%).

The screen: per cell and side, a sample is faulted when it is slower than the fastest sample of
its side by more than `sigmas` spreads. Faults only slow a process, so the fastest sample is a
clean one unless every sample of the side is faulted. The spread is the larger of the calibrated
per-sample sd (the floor / sqrt 2) and the sd of the samples the screen keeps (found in a few
rounds, starting from the floor: `clean_sd`): a box noisier than its calibration, or drifting,
widens the margin instead of screening its clean samples. With fewer than MIN_SAMPLES
samples on a side no spread can be told from a fault: nothing is screened. A pair with a faulted
sample in any cell of its run is dropped whole (never only the head's sample), as a throttled
pair is, and measured again.

Box faults strike both sides alike. When the head's samples are faulted in significantly more
pairs than main's (a one-sided binomial test at ASYMMETRY_ALPHA), the slowness is the head's own
(a head fast in some processes and slow in others): the run screens nothing, and its pairs are
judged as measured.

Pure and deterministic: the harness screens after every pair, the grader replays it from the
recorded samples, the simulator runs it on arrays of simulated PRs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

FAULT_SIGMAS = 8.0  # the rule's `fault_sigmas` for new jobs (0: no screen, the rule before)
ROUNDS = 3  # the clean samples and their spread, found again with the spread found
MIN_SAMPLES = 2
ASYMMETRY_ALPHA = 0.01
# attempts per pair of the last look: a throttled pair may be measured again once (the rule
# before the screen), a screened one twice: a slow first test in a third of the processes drops
# 5 pairs in 9, and 3 attempts a pair give a run its 5 verdict pairs in 99% of such runs
ATTEMPTS, SCREENED_ATTEMPTS = 2, 3


def attempts_cap(last: int, sigmas: float) -> int:
    """The most pairs a run measures, dropped ones included, for a last look of `last` pairs."""
    return (SCREENED_ATTEMPTS if sigmas > 0 else ATTEMPTS) * last


def faulted(x: np.ndarray, floor: np.ndarray | float, sigmas: float = FAULT_SIGMAS) -> np.ndarray:
    """Faulted samples of cells: `x` (..., 2, t) log rates oriented so that higher is better,
    [base, head] on the second-last axis and the pairs in measured order on the last; `floor`
    the per-pair calibrated sd, broadcastable to x's leading axes (...)."""
    x = np.asarray(x, dtype=float)
    if sigmas <= 0 or x.shape[-1] < MIN_SAMPLES:
        return np.zeros(x.shape, dtype=bool)
    least = np.broadcast_to(np.asarray(floor, dtype=float) / math.sqrt(2), x.shape[:-2])
    top = np.max(x, axis=-1, keepdims=True)
    spread = least
    for _ in range(ROUNDS):
        clean = x >= top - sigmas * spread[..., None, None]
        spread = np.maximum(least, clean_sd(x, clean))
    return x < top - sigmas * spread[..., None, None]


def clean_sd(x: np.ndarray, clean: np.ndarray) -> np.ndarray:
    """The sd of the samples `clean` says are not faulted, about each side's own mean, both sides
    pooled (ddof: one per side); 0 where they leave no degree of freedom. (..., 2, t) -> (...)."""
    count = clean.sum(axis=-1, keepdims=True)
    mean = np.where(clean, x, 0.0).sum(axis=-1, keepdims=True) / np.maximum(count, 1)
    squares = np.where(clean, (x - mean) ** 2, 0.0).sum(axis=(-2, -1))
    df = count.sum(axis=(-2, -1)) - 2
    return np.sqrt(np.where(df > 0, squares / np.maximum(df, 1), 0.0))


def screened_pairs(x: np.ndarray, floors: np.ndarray, sigmas: float = FAULT_SIGMAS) -> np.ndarray:
    """The pairs of a run the screen drops: `x` (..., cells, 2, t) as `faulted` takes it, `floors`
    (cells,). A pair is dropped when either of its samples is faulted in any cell, unless the
    head's faults outnumber main's beyond chance (module docstring): then none is."""
    bad: np.ndarray = np.any(faulted(x, np.asarray(floors, dtype=float), sigmas), axis=-3)
    base, head = bad[..., 0, :].sum(axis=-1), bad[..., 1, :].sum(axis=-1)  # bad: (..., 2, t)
    own = np.asarray(np.vectorize(head_faults_its_own, otypes=[bool])(base, head))
    return np.asarray(np.any(bad, axis=-2) & ~own[..., None])


@lru_cache(maxsize=4096)
def head_faults_its_own(base: int, head: int) -> bool:
    """Are `head` faulted pairs against main's `base` more than box faults, which strike both
    sides alike, give (P(X >= head) for X ~ Binomial(base + head, 1/2) below ASYMMETRY_ALPHA)?"""
    base, head = int(base), int(head)
    if head == 0:
        return False
    n = base + head
    tail = sum(math.comb(n, k) for k in range(head, n + 1)) / 2**n
    return tail < ASYMMETRY_ALPHA


def oriented(values: Sequence[float], higher_is_better: bool) -> np.ndarray:
    """Log rates with faults on the low side: a time (lower is better) is negated."""
    logs = np.log(np.asarray(values, dtype=float))
    return logs if higher_is_better else -logs
