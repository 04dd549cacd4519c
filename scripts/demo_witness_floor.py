"""The demo witness's floor on this machine: A/A pairs of main's witness process (the demo
profile's argv at N decode tokens), each pair on one fresh prompt, timed by the process's CPU
time as the harness's `cpu` clock times it, and its wall time. Prints the per-pair sd of both,
and each variant's mean (main and `faster`), for the profile's `sd_floor_s` and its comment.

Usage: python scripts/demo_witness_floor.py [--tokens 512] [--pairs 20]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics as st
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.demo.repo import generate  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(tree: Path, model: Path, prompt: Path, tokens: int) -> tuple[float, float]:
    argv = [sys.executable, str(tree / "demo_engine.py"), "bench", "--model", str(model),
            "--ctxs", "64", "--decode-tokens", str(tokens), "--reps", "1", "--tokens", str(prompt)]
    cpu, wall = _cpu(), time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, env={**os.environ,
                                                              "OPENBLAS_NUM_THREADS": "1"})
    return _cpu() - cpu, time.perf_counter() - wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--pairs", type=int, default=20)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="demo-floor-"))
    demo = generate(root / "demo")
    trees = {}
    for name, ref in (("main", demo.main_sha), ("faster", demo.prs["faster"])):
        trees[name] = root / name
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(trees[name]), ref],
                       cwd=demo.path, check=True)
    rng = random.Random(1)
    prompt = root / "prompt.json"
    rows: dict[str, list[tuple[float, float]]] = {"a": [], "b": [], "faster": []}
    for pair in range(a.pairs):
        prompt.write_text(json.dumps([rng.randrange(256) for _ in range(64 + a.tokens)]))
        for side in ("a", "b") if pair % 2 == 0 else ("b", "a"):
            rows[side].append(timed(trees["main"], demo.model_path, prompt, a.tokens))
        if pair < 6:
            rows["faster"].append(timed(trees["faster"], demo.model_path, prompt, a.tokens))
    for k, name in ((0, "cpu"), (1, "wall")):
        d = [x[k] - y[k] for x, y in zip(rows["a"], rows["b"], strict=True)]
        print(f"{name}: main {st.mean(x[k] for x in rows['a'] + rows['b']):.3f} s, faster "
              f"{st.mean(x[k] for x in rows['faster']):.3f} s; per-pair sd {st.stdev(d):.4f} s "
              f"over {len(d)} pairs")


if __name__ == "__main__":
    main()
