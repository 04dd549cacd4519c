"""`evalbot demo` on a busy machine: N runs in a row beside K busy-loop processes (issue 48).

    python bench/demo_under_load.py [--runs 10] [--busy 4] [--only faster ...] [--keep DIR]

Each run is the shipped command, `python -m evalbot demo --json`, on a fresh output folder, with
the shipped demo profile. One row per run: each PR's verdict kind (as expected or not), the
honest `faster` PR's cells that are not believed or not confirmed (none is the bar), its
witnesses' pairs and why each stopped, the run's wall time and the machine's load average at
its end (other work on the machine counts too: say it beside the figures). The busy loops
(`--busy 0`: none, a quiet run) are stopped whatever happens. `--keep DIR` keeps each run's
output folder as DIR/run-N, its printed verdicts in DIR/run-N/stdout.json (tests/test_demo_e2e.py
checks the broken PR's outputs there: one demo evaluation for both). Exit status 0 only when every
run gave every expected verdict and no honest row went unbelieved.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evalbot.evaluation.demo import EXPECTED  # noqa: E402

HONEST = "faster"  # the PR whose every row must be believed and confirmed


def _busy_loop() -> None:
    while True:  # one core's worth of load until terminated
        pass


def one_run(only: list[str], keep: Path | None) -> tuple[dict[str, Any], float, str]:
    """The demo's verdicts by PR, its wall time, and its error output's tail where it failed;
    its output folder is `keep` where given, else a temporary one."""
    with tempfile.TemporaryDirectory(prefix="demo-under-load-") as tmp:
        out = keep if keep is not None else Path(tmp) / "out"
        out.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "evalbot", "demo", "--out", str(out),
                "--json", *[a for name in only for a in ("--only", name)]]
        started = time.monotonic()
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
        wall = time.monotonic() - started
        if keep is not None:
            (out / "stdout.json").write_text(done.stdout)
        published = {}  # each PR's full results: its witnesses' pairs, its box time per stage
        for name in json.loads(done.stdout or "{}"):
            private = out / name / "private" / "results.json"
            if private.is_file():
                published[name] = json.loads(private.read_text())
    try:
        verdicts = json.loads(done.stdout)
    except json.JSONDecodeError:
        verdicts = {}
    for name, verdict in verdicts.items():
        verdict["_witnesses"] = published.get(name, {}).get("witnesses", [])
        verdict["_box_s"] = published.get(name, {}).get("timing", {}).get("total_s", 0.0)
    return verdicts, wall, "" if verdicts else done.stderr[-800:]


def unbelieved(verdict: dict[str, Any]) -> list[str]:
    """The cells of an honest verdict that did not get a confirmed, believed row."""
    return [f"{c['key'].split('/')[-1]} ({c.get('confirmation')})" for c in verdict["cells"]
            if not c.get("believed", True) or c.get("confirmation") not in (None, "confirmed")]


def witness_note(verdict: dict[str, Any]) -> str:
    """Each harness-owned witness's kept pairs and why it stopped: `name:pairs/stop`."""
    notes = []
    for w in verdict.get("_witnesses", []):
        if w.get("source") != "witness":
            continue
        pairs = len({s["pair"] for s in w.get("samples", []) if not s.get("dropped")})
        notes.append(f"{w['name']}:{pairs}/{w.get('settled_by') or w.get('stopped') or 'last'}")
    return " ".join(notes)


def box_times(verdicts: dict[str, Any], names: list[str]) -> str:
    """Each PR's box time in seconds, in the table's order: `37/92/106/72`."""
    return "/".join(f"{verdicts.get(n, {}).get('_box_s', 0.0):.0f}" for n in names)


def row(run: int, verdicts: dict[str, Any], wall: float, names: list[str]) -> tuple[str, bool]:
    """One run's table row, and whether it gave every expected verdict with no honest row
    unbelieved."""
    kinds = [verdicts.get(n, {}).get("kind", "missing") for n in names]
    marks = [k if k == EXPECTED[n] else f"**{k}**" for k, n in zip(kinds, names, strict=True)]
    honest = verdicts.get(HONEST)
    lost = unbelieved(honest) if honest else []
    ok = marks == kinds and not lost
    return (f"| {run} | {' | '.join(marks)} | {', '.join(lost) or 'none'} | "
            f"{witness_note(honest) if honest else ''} | {box_times(verdicts, names)} | "
            f"{wall:.0f} | {os.getloadavg()[0]:.1f} |"), ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--busy", type=int, default=4, help="busy-loop processes beside it")
    parser.add_argument("--only", action="append", default=[], choices=list(EXPECTED))
    parser.add_argument("--keep", type=Path, help="keep each run's output folder as KEEP/run-N")
    args = parser.parse_args()
    names = args.only or list(EXPECTED)
    print(f"`evalbot demo`, {args.runs} runs in a row beside {args.busy} busy loops on "
          f"{os.cpu_count()} cores (each row as its run ends)")
    print(f"| run | {' | '.join(names)} | {HONEST}: not believed | {HONEST}'s witnesses | "
          f"box s per PR | wall (s) | load |\n|---|{'---|' * len(names)}---|---|---|---|---|",
          flush=True)
    loops = [multiprocessing.Process(target=_busy_loop, daemon=True) for _ in range(args.busy)]
    for loop in loops:
        loop.start()
    good = 0
    try:
        for i in range(args.runs):
            verdicts, wall, error = one_run(args.only,
                                            args.keep / f"run-{i + 1}" if args.keep else None)
            line, ok = row(i + 1, verdicts, wall, names)
            good += ok
            print(line + (f"\nrun {i + 1} failed: {error}" if error else ""), flush=True)
    finally:
        for loop in loops:
            loop.terminate()
    print(f"\n{good} of {args.runs} runs: every verdict as expected, no honest row unbelieved")
    return 0 if good == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
