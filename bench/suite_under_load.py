"""The test suite on a busy machine: N full runs while every core is kept busy by another process.

    python bench/suite_under_load.py [--runs 3] [--busy N] [-- pytest args]

Starts one busy-loop process per core (or --busy N), runs the whole pytest suite --runs times in a
row (with the checkout's .venv interpreter when there is one), and prints one row per run
(outcome, counts, pytest's own duration) and the tests that failed; a failed run's whole
output is kept in a file whose path it prints. The busy loops are stopped
whatever happens. Exit status 0 only when every run passed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"(\d+ (?:passed|failed).*? in [\d.]+s)")


def _spin() -> None:
    while True:  # burn one core until terminated
        pass


def _python() -> str:
    """The checkout's venv (what ./dev test runs), else this interpreter."""
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.is_file() else sys.executable


def _one_run(pytest_args: list[str]) -> tuple[int, str, float, list[str]]:
    started = time.monotonic()
    done = subprocess.run([_python(), "-m", "pytest", "-p", "no:cacheprovider", *pytest_args],
                          cwd=ROOT, capture_output=True, text=True)
    text = done.stdout + done.stderr
    if done.returncode != 0:  # the failures' own messages: the summary lines are cut short
        with tempfile.NamedTemporaryFile("w", prefix="suite-under-load-", suffix=".log",
                                         delete=False) as log:
            log.write(text)
        print(f"pytest's output of the failed run: {log.name}", file=sys.stderr, flush=True)
    lines = text.strip().splitlines()
    tail = lines[-1:] or [""]
    match = SUMMARY.search(tail[0])
    summary = match.group(1) if match else tail[0][:80]
    failed = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
    return done.returncode, summary, time.monotonic() - started, failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 2)
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for s in spinners:
        s.start()
    rows = []
    try:
        for i in range(args.runs):
            rows.append((i + 1, *_one_run(args.pytest_args)))
            print(f"run {i + 1}: {rows[-1][2]}", file=sys.stderr, flush=True)
    finally:
        for s in spinners:
            s.terminate()
    what = "pytest " + " ".join(args.pytest_args) if args.pytest_args else "whole suite"
    print(f"\n{what}, {args.runs} runs in a row, {args.busy} busy-loop processes "
          f"on {os.cpu_count()} cores")
    print("| run | outcome | pytest summary | wall (s) |\n|---|---|---|---|")
    for run, rc, summary, wall, _ in rows:
        print(f"| {run} | {'pass' if rc == 0 else f'FAIL (rc {rc})'} | {summary} | {wall:.0f} |")
    for run, _, _, _, failed in rows:
        for line in failed:
            print(f"run {run}: {line}")
    return 0 if all(row[1] == 0 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
