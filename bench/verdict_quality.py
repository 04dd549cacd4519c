"""How often do speed verdicts lie, and what do they cost? A vectorised simulator of the real rule.

It draws paired samples for many simulated PRs at once and runs the decision code the harness
and the grader run (engine.stats.decide with the critical values of evalbot.sequential.schedule),
look by look, stopping each cell at its first decided look and each run (one process = one
sample of each of its cells) once all its cells are decided, as engine/speed.py does.

Noise sources:
  synthetic  per-run noise sigma (0.5%, 1%, 2%), normal or heavy-tailed (t with 3 degrees of
             freedom, scaled to the same sd); cells of one process share half their variance
             (correlation 0.5); a slow random-walk drift of the box (step 0.1 sigma per process)
             is shared by everything measured after it.
  h200       resampling the 30 measured llama-bench processes of
             tests/data/fixtures/h200-aa-single-rep.json (6 cells each: prefill and decode at
             depths 0, 4k, 16k); one process draws one whole measured run, so the measured
             correlation between cells of one process is kept. Runs of 9 cells take 6 cells from
             one measured run and the 3 decode cells again from another.
The sd floor of each cell is what `evalbot calibrate` would store: sqrt(2) x the per-run sd.

Figures per PR: false = any cell improved or regressed in an A/A; inconc = any cell
inconclusive in an A/A; power = the changed decode cell is improved, for +2/+3/+5%; pairs =
mean pairs per run in an A/A (process pairs; 18 cells are two runs of 9). The single-sample
2%-gate rule (the existing bot) is printed beside: one sample per side, flagged when |gain| > 2%.

Usage: python bench/verdict_quality.py [--sims 10000] [--looks 4,8,12,16,24] [--alpha 0.01]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine import stats  # noqa: E402
from evalbot.sequential import schedule  # noqa: E402

FIXTURE = ROOT / "tests" / "data" / "fixtures" / "h200-aa-single-rep.json"
RUN_CELLS = 9  # cells per process (one run); 18 cells are two runs
CELL_CORR = 0.5
DRIFT_STEP = 0.1
EFFECTS = (0.02, 0.03, 0.05)
H200_COLUMNS = (0, 1, 2, 3, 4, 5, 1, 3, 5)  # fixture column of each cell of a 9-cell run
H200_BLOCK = (0, 0, 0, 0, 0, 0, 1, 1, 1)  # which independently drawn measured run feeds it
EFFECT_CELL = {"synthetic": 0, "h200": 5}  # the changed cell: a decode cell (h200: decode@16k)

# draws(rng, sims, pairs) -> (base, head) log rates of one run, shape (sims, RUN_CELLS, pairs)
Draws = Callable[[np.random.Generator, int, int], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Noise:
    name: str
    draws: Draws
    floor: np.ndarray  # per cell of a run: the calibrated sd of the per-pair log-ratio
    effect_cell: int


def synthetic(sigma: float, heavy: bool) -> Noise:
    def unit(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        if heavy:
            return rng.standard_t(3, size=shape) / math.sqrt(3.0)
        return rng.standard_normal(shape)

    def draws(rng: np.random.Generator, sims: int, pairs: int) -> tuple[np.ndarray, np.ndarray]:
        procs = 2 * pairs
        shared = unit(rng, (sims, 1, procs))
        own = unit(rng, (sims, RUN_CELLS, procs))
        x = sigma * (math.sqrt(CELL_CORR) * shared + math.sqrt(1 - CELL_CORR) * own)
        x += np.cumsum(DRIFT_STEP * sigma * rng.standard_normal((sims, 1, procs)), axis=2)
        return _abba(x)

    name = f"{'t3' if heavy else 'normal'} {100 * sigma:.1f}%"
    return Noise(name, draws, np.full(RUN_CELLS, math.sqrt(2) * sigma), EFFECT_CELL["synthetic"])


def _abba(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Processes in time order -> (base, head) per pair; base first in even pairs."""
    first, second = x[..., 0::2], x[..., 1::2]
    even = (np.arange(first.shape[-1]) % 2 == 0)
    return np.where(even, first, second), np.where(even, second, first)


def h200() -> tuple[Noise, float]:
    """The measured runs as a noise source, and the mean seconds per llama-bench process."""
    doc = json.loads(FIXTURE.read_text())
    logs = np.log([[e["avg_ts"] for e in run] for run in doc["runs"]])
    logs -= logs.mean(axis=0)
    cols, blocks = np.array(H200_COLUMNS), np.array(H200_BLOCK)

    def draws(rng: np.random.Generator, sims: int, pairs: int) -> tuple[np.ndarray, np.ndarray]:
        pick = rng.integers(0, logs.shape[0], size=(sims, 2, 2 * pairs))  # (sim, block, proc)
        x = logs[pick[:, blocks, :], cols[None, :, None]]
        return _abba(x)

    floor = math.sqrt(2) * logs.std(axis=0, ddof=1)[cols]
    starts = [dt.datetime.fromisoformat(r[0]["test_time"].replace("Z", "+00:00"))
              for r in doc["runs"]]
    per_process = (starts[-1] - starts[0]).total_seconds() / (len(starts) - 1)
    return Noise("H200 resampled", draws, floor, EFFECT_CELL["h200"]), per_process


@dataclass(frozen=True)
class Outcome:
    false: float
    inconclusive: float
    pairs: float  # mean pairs per run
    improved: float  # the changed cell improved (power), for effect runs


def simulate(noise: Noise, cells: int, effect: float, looks: list[int], alpha: float,
             sims: int, rng: np.random.Generator, s: float = 0.02, t: float = 0.02) -> Outcome:
    """Run the rule over `sims` PRs of `cells` cells (runs of RUN_CELLS) with one changed cell."""
    bounds = schedule(looks, cells, alpha)
    runs = math.ceil(cells / RUN_CELLS)
    finals, used = [], []
    for run in range(runs):
        base, head = noise.draws(rng, sims, looks[-1])
        r = head - base
        if run == 0 and effect:
            r[:, noise.effect_cell, :] += math.log1p(effect)
        final, pairs = _run_rule(r, bounds, noise.floor, s, t)
        finals.append(final)
        used.append(pairs)
    final = np.concatenate(finals, axis=1)[:, :cells]
    wrong = (final == stats.IMPROVED) | (final == stats.REGRESSED)
    return Outcome(
        false=float(np.mean(wrong.any(axis=1))),
        inconclusive=float(np.mean((final == stats.UNDECIDED).any(axis=1))),
        pairs=float(np.mean(np.stack(used))),
        improved=float(np.mean(final[:, noise.effect_cell] == stats.IMPROVED)),
    )


def _run_rule(r: np.ndarray, bounds: list[stats.Bounds], floor: np.ndarray, s: float,
              t: float) -> tuple[np.ndarray, np.ndarray]:
    """Final decision code per (sim, cell) and pairs the run used per sim."""
    csum, csq = np.cumsum(r, axis=2), np.cumsum(r * r, axis=2)
    final = np.full(r.shape[:2], stats.UNDECIDED, dtype=np.int8)
    pairs = np.full(r.shape[0], bounds[-1].pairs)
    running = np.ones(r.shape[0], dtype=bool)
    for b in bounds:
        n = b.pairs
        mean = csum[..., n - 1] / n
        sd = np.sqrt(np.maximum(csq[..., n - 1] - n * mean * mean, 0.0) / (n - 1))
        code = stats.decide(mean, sd, b, floor[None, :], s, t)
        fresh = final == stats.UNDECIDED
        final = np.where(fresh, code, final)
        done = running & (final != stats.UNDECIDED).all(axis=1)
        pairs[done] = n
        running &= ~done
    return final, pairs


def single_sample(noise: Noise, cells: int, effect: float, sims: int,
                  rng: np.random.Generator) -> Outcome:
    """The existing bot: one sample per side per cell, a fixed +-2% gate."""
    gains = []
    for run in range(math.ceil(cells / RUN_CELLS)):
        base, head = noise.draws(rng, sims, 1)
        r = (head - base)[..., 0]
        if run == 0 and effect:
            r[:, noise.effect_cell] += math.log1p(effect)
        gains.append(np.expm1(r))
    g = np.concatenate(gains, axis=1)[:, :cells]
    return Outcome(false=float(np.mean((np.abs(g) > 0.02).any(axis=1))), inconclusive=0.0,
                   pairs=1.0, improved=float(np.mean(g[:, noise.effect_cell] > 0.02)))


def table(noises: list[Noise], looks: list[int], alpha: float, sims: int, seed: int,
          per_process_s: float) -> list[str]:
    rng = np.random.default_rng(seed)
    head = (f"{'noise':<16}{'cells':>6} | {'false':>6}{'inconc':>7}{'pow+2':>7}{'pow+3':>7}"
            f"{'pow+5':>7}{'pairs':>7}{'box min':>8} | {'1-sample: false':>15}{'pow+3':>7}")
    lines = [head, "-" * len(head)]
    for noise in noises:
        for cells in (9, 18):
            aa = simulate(noise, cells, 0.0, looks, alpha, sims, rng)
            power = [simulate(noise, cells, e, looks, alpha, sims // 2, rng).improved
                     for e in EFFECTS]
            one = single_sample(noise, cells, 0.0, sims, rng)
            one3 = single_sample(noise, cells, 0.03, sims, rng)
            runs = math.ceil(cells / RUN_CELLS)
            minutes = (aa.pairs * runs * 2 * per_process_s / 60) if noise.name.startswith("H200") \
                else float("nan")
            lines.append(
                f"{noise.name:<16}{cells:>6} | {_pct(aa.false):>6}{_pct(aa.inconclusive):>7}"
                + "".join(f"{_pct(p):>7}" for p in power)
                + f"{aa.pairs:>7.1f}{_num(minutes):>8} | {_pct(one.false):>15}"
                f"{_pct(one3.improved):>7}")
    return lines


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _num(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.1f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=10000, help="simulated PRs per A/A row")
    ap.add_argument("--looks", default="4,8,12,16,24", help="pair counts of the looks")
    ap.add_argument("--h200-looks", default="4,8,16,24,32,48",
                    help="looks for the resampled H200 rows (decode noise is 1.6-2.1%%)")
    ap.add_argument("--alpha", type=float, default=0.01, help="per-PR false-verdict level")
    ap.add_argument("--seed", type=int, default=20261129)
    args = ap.parse_args(argv)
    started = time.monotonic()
    looks = [int(x) for x in args.looks.split(",")]
    h200_looks = [int(x) for x in args.h200_looks.split(",")]
    measured, per_process = h200()
    synthetic_rows = [synthetic(sig, heavy) for heavy in (False, True)
                      for sig in (0.005, 0.01, 0.02)]
    print(f"rule: alpha {args.alpha} per PR, s = t = 2%, looks {looks} (synthetic), "
          f"{h200_looks} (H200); {args.sims} A/A PRs per row, {args.sims // 2} per power cell")
    print("\n".join(table(synthetic_rows, looks, args.alpha, args.sims, args.seed, per_process)))
    print("\n".join(table([measured], h200_looks, args.alpha, args.sims, args.seed + 1,
                          per_process)[2:]))
    print(f"box min: pairs x 2 processes x {per_process:.1f} s per llama-bench process "
          f"(the fixture's pace), per PR, without builds and warm-ups. "
          f"{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
