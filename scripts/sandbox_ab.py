#!/usr/bin/env python3
"""Two sandbox launchers on one box (issue 31): the same command, started through each, in
alternating pairs (old, new, new, old, ...), and each side's wall time and printed rates.

    python3 scripts/sandbox_ab.py --old OLD.py --new NEW.py --spec SPEC_JSON --pairs N \\
        [--out AB.json] [--margin 0.02] -- ARGV...

OLD.py and NEW.py are `sandbox_exec.py` launchers (`run SPEC_JSON -- ARGV`: the one before the
bubblewrap sandbox is `git show 67a49bc^:engine/sandbox/sandbox_exec.py`). A line of ARGV's
output that starts `SWEEP_JSON ` (qwen3_gguf_bench's sweep) gives a rate per context and metric.
Per quantity: each side's median, the change (the geometric mean of new / old over the pairs)
with its 99% t interval, and whether that interval lies inside ±margin (the shipped profiles'
equivalence margin, 2%). AB.json is rewritten after every pair, so a cut run keeps its pairs.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from evalbot.grading.quantiles import t_isf  # noqa: E402

PREFIX = "SWEEP_JSON "
METRICS = {"decode_tps": "decode", "prefill_pp": "prefill"}


def started(launcher: str, spec: str, argv: list[str]) -> dict[str, float]:
    """One process through one launcher: its wall time and the rates it printed."""
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-I", launcher, "run", spec, "--", *argv],
                          capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"{launcher} exited {done.returncode}: {done.stderr[-2000:]}")
    out = {"wall_s": wall}
    for line in done.stdout.splitlines():
        if line.startswith(PREFIX):
            for ctx, row in json.loads(line[len(PREFIX):]).items():
                out.update({f"{METRICS[k]}@{ctx}": float(v) for k, v in row.items()
                            if k in METRICS and float(v) > 0})
    return out


def table(pairs: list[dict[str, dict[str, float]]], margin: float) -> list[str]:
    rows = ["| quantity | old (median) | new (median) | new / old | 99% interval | within "
            f"±{100 * margin:g}% |", "|---|---:|---:|---:|---|---|"]
    for key in pairs[0]["old"]:
        old = np.array([p["old"][key] for p in pairs])
        new = np.array([p["new"][key] for p in pairs])
        logs = np.log(new / old)
        half = (float(t_isf(0.005, len(logs) - 1)) * float(np.std(logs, ddof=1)) / math.sqrt(len(logs))
                if len(logs) > 1 else math.inf)
        lo, mid, hi = (math.expm1(float(np.mean(logs)) + d) for d in (-half, 0.0, half))
        inside = -margin < lo and hi < margin
        rows.append(f"| {key} | {np.median(old):.4g} | {np.median(new):.4g} | {100 * mid:+.2f}% | "
                    f"[{100 * lo:+.2f}%, {100 * hi:+.2f}%] | {'yes' if inside else 'no'} |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--spec", required=True, help="the launchers' run spec (JSON)")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--margin", type=float, default=0.02)
    ap.add_argument("--out", type=Path)
    ap.add_argument("argv", nargs="+")
    a = ap.parse_args()
    if a.pairs < 2:
        ap.error("--pairs: at least 2 (an interval needs two)")
    pairs: list[dict[str, dict[str, float]]] = []
    for i in range(a.pairs):
        order = ("old", "new") if i % 2 == 0 else ("new", "old")
        pairs.append({side: started(getattr(a, side), a.spec, a.argv) for side in order})
        if set(pairs[-1]["old"]) != set(pairs[-1]["new"]):
            raise SystemExit(f"pair {i}: the two sides printed different quantities")
        if a.out:
            a.out.write_text(json.dumps({"argv": a.argv, "pairs": pairs}, indent=1))
    print("\n".join(table(pairs, a.margin)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
