"""The test suite on a busy machine: N full runs while every core is kept busy by two processes.

    python bench/suite_under_load.py [--runs 3] [--busy-per-core 2 | --busy N] [--dev]
                                     [-- pytest args]

Starts two busy-loop processes per core (issue 48's load: 2 cores, 4 busy loops; or --busy N),
runs the whole pytest suite --runs times in a row (with the checkout's .venv interpreter when
there is one), or with --dev what CI runs (`./dev test`: set-up, the suite, mypy and the wheel
check beside it), and prints one row per run (outcome, counts, pytest's own duration, the wall
time, and the margin CI's timeout in .github/workflows/ci.yml leaves: it must be at least half
the run's time) and the tests that failed; a failed run's whole output is kept in a file whose
path it prints. The busy loops are stopped whatever happens. Exit status 0 only when every run
passed.
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

import yaml

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"(\d+ (?:passed|failed).*? in [\d.]+s(?: \([\d:]+\))?)")
CI_WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"


def ci_timeout_s() -> float:
    """The test job's timeout-minutes in CI's workflow, in seconds."""
    jobs = yaml.safe_load(CI_WORKFLOW.read_text())["jobs"]
    return 60.0 * float(jobs["test"]["timeout-minutes"])


def _spin() -> None:
    while True:  # burn one core until terminated
        pass


def _python() -> str:
    """The checkout's venv (what ./dev test runs), else this interpreter."""
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.is_file() else sys.executable


def _one_run(pytest_args: list[str], dev: bool) -> tuple[int, str, float, list[str]]:
    started = time.monotonic()
    argv = ([str(ROOT / "dev"), "test"] if dev else
            [_python(), "-m", "pytest", "-p", "no:cacheprovider", *pytest_args])
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    text = done.stdout + done.stderr
    if done.returncode != 0:  # the failures' own messages: the summary lines are cut short
        with tempfile.NamedTemporaryFile("w", prefix="suite-under-load-", suffix=".log",
                                         delete=False) as log:
            log.write(text)
        print(f"pytest's output of the failed run: {log.name}", file=sys.stderr, flush=True)
    lines = text.strip().splitlines()
    found = [m.group(1) for line in lines if (m := SUMMARY.search(line))]
    summary = found[-1] if found else (lines[-1:] or [""])[0][:80]
    failed = [line for line in lines if line.startswith(("FAILED ", "ERROR ", "./dev: "))
              or line.endswith(" FAILED") or "FAILED (log:" in line]
    return done.returncode, summary, time.monotonic() - started, failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--busy-per-core", type=int, default=2)
    parser.add_argument("--busy", type=int, default=None, help="busy loops in all (default: "
                        "--busy-per-core per core)")
    parser.add_argument("--dev", action="store_true", help="run `./dev test`, as CI does")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    if args.dev and args.pytest_args:
        parser.error("--dev runs the whole suite as CI does: no pytest arguments")
    busy = args.busy if args.busy is not None else args.busy_per_core * (os.cpu_count() or 2)
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(busy)]
    for s in spinners:
        s.start()
    rows = []
    try:
        for i in range(args.runs):
            rows.append((i + 1, *_one_run(args.pytest_args, args.dev)))
            print(f"run {i + 1}: {rows[-1][2]}", file=sys.stderr, flush=True)
    finally:
        for s in spinners:
            s.terminate()
    what = ("./dev test" if args.dev else
            "pytest " + " ".join(args.pytest_args) if args.pytest_args else "whole suite")
    timeout = ci_timeout_s()
    print(f"\n{what}, {args.runs} runs in a row, {busy} busy-loop processes "
          f"on {os.cpu_count()} cores; CI's timeout {timeout / 60:.0f} min")
    print("| run | outcome | pytest summary | wall (s) | CI margin (s) | margin >= half |\n"
          "|---|---|---|---|---|---|")
    for run, rc, summary, wall, _ in rows:
        margin = timeout - wall
        print(f"| {run} | {'pass' if rc == 0 else f'FAIL (rc {rc})'} | {summary} | {wall:.0f} | "
              f"{margin:.0f} | {'yes' if margin >= wall / 2 else 'NO'} |")
    for run, _, _, _, failed in rows:
        for line in failed:
            print(f"run {run}: {line}")
    return 0 if all(row[1] == 0 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
