"""Noise of sparkinfer on the H200: two builds of one commit, alternating sweeps (docs/gpu-e2e.md).

Reads the recorded sweeps of the retired phase-1 script (its text: `git show
e665b22^:scripts/gpu_sparkinfer_measure.sh`; tests/data/sparkinfer/h200-alternating-sweeps.jsonl:
rounds A,B then B,A, ...; the 131072 runs and the slow head once)
and prints, per cell of the shipped profile's qwythos sweep, the mean rate, the spread of each
build over rounds, and the standard deviation of the per-round log-ratio B/A: the quantity the
pair statistics see for an A/A evaluation. Run: `python bench/sparkinfer_noise.py [FILE]`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

DEFAULT = Path(__file__).parents[1] / "tests" / "data" / "sparkinfer" / "h200-alternating-sweeps.jsonl"
FIELDS = {"decode": "decode_tps", "prefill": "prefill_pp"}


def rounds(rows: list[dict]) -> dict[str, dict[str, list[float]]]:
    """cell -> build -> rates in round order, from the noise rounds (names rN-a / rN-b)."""
    out: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        name = row["name"]
        if not (name.startswith("r") and name[-2:] in ("-a", "-b")):
            continue
        for ctx, rates in row["r"].items():
            for metric, field in FIELDS.items():
                if rates[field] > 0:
                    out.setdefault(f"{metric}@{ctx}", {"a": [], "b": []})[name[-1]].append(rates[field])
    return out


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0


def main(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    print(f"{'cell':15s} {'n':>2s} {'mean tok/s':>11s} {'CV A':>7s} {'CV B':>7s} "
          f"{'B/A mean':>9s} {'sd log B/A':>10s}")
    for cell, sides in rounds(rows).items():
        n = min(len(sides["a"]), len(sides["b"]))
        ratios = [math.log(b / a) for a, b in zip(sides["a"][:n], sides["b"][:n], strict=True)]
        sd = statistics.stdev(ratios) if n > 1 else float("nan")
        print(f"{cell:15s} {n:2d} {statistics.fmean(sides['a'] + sides['b']):11.1f} "
              f"{100 * cv(sides['a']):6.3f}% {100 * cv(sides['b']):6.3f}% "
              f"{100 * statistics.fmean(ratios):+8.3f}% {100 * sd:9.3f}%")
    walls = {row["name"]: float(row["wall"]) for row in rows}
    sweep = [w for name, w in walls.items() if name.startswith("r")]
    print(f"\nwall time per sweep (process start to exit): {min(sweep):.2f}-{max(sweep):.2f} s "
          f"over {len(sweep)} sweeps")
    for row in rows:
        if not row["name"].startswith("r"):
            print(f"{row['name']:12s} {walls[row['name']]:7.2f} s  {json.dumps(row['r'])}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", nargs="?", type=Path, default=DEFAULT,
                        help="recorded sweeps, one JSON object a line (default: the H200 fixture)")
    path = parser.parse_args().file
    if not path.is_file():
        parser.error(f"{path}: no such file")
    main(path)
