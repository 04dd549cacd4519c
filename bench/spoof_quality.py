"""Can a head that prints rates it does not have earn a tier? Per profile, per sample pace.

Each evaluation is the real harness (engine.measure.speed.Measurement: its warm-ups, ABBA pairs,
looks, budget, the samples' wall-time checks, the witnesses' order, room and stops) on a
simulated box (bench/_simbox.py), graded by the real grading (evalbot.grading.grade.grade). The
job is the shipped profile's (evalbot.evaluation.jobspec.make_job); the processes' times, rates
and noise are the profile's measured fixtures under tests/data/ (bench/_paces.py), "pace
assumed" where none exists; `--paces` replaces every sample process's time (the same rates and
noise, a longer fixed part) so the rule is seen at several paces.

Heads (bench/_rows.py):
  lie F all       prints F x its rates on every cell; really as fast as main (its witness work
                  is honest: a witness's time is the work done, whatever the process prints)
  lie F one       prints F x on the first witnessed cell only
  lie F ctx       prints F x on every cell at the first witnessed cell's context only
  junk tail a     its witness computes the first share a of its output ids and invents the
                  rest; its bench tool skips the same share of its decode work and prints rates
                  true to the work it did (so the samples' wall times agree with them)
  attack: fork after READY   issue 29's demo attack (printed +81.9%): its witness forks and the
                  orphan does the work; the handoff clock (and the cpu clock's cgroup) still
                  times it, so its witness costs main's
  attack: batch read-ahead   issue 29's demo attack (printed +67.8%): its witness waits for ids
                  ahead of its answers, which the stepped protocol never sends: killed at the
                  witness's timeout, its output unverified
Target: each earns a tier in at most 1% of its evaluations (at least 1,000 a row).
Honest heads and the A/A: bench/verdict_quality.py.
Box time (a row's total, then per stage): bench/_rows.py; per verdict kind: bench/box_time.py.

Demo engine (`--demo N`): N real evaluations per case on this machine, through the harness and
the grading (lie 2x all, lie 1.05x all, honest = the demo's `faster` variant).

Usage: python bench/spoof_quality.py [--sims 300] [--liar-sims 1000] [--paces measured,25,60,120]
       [--profiles sparkinfer,llamacpp] [--heads 1.05x,junk] [--jobs N] [--demo 0]
At the measured pace, 1,000 evaluations a row, on 2 cores: llamacpp 342 s, sparkinfer (both
variants) 726 s; each further pace about as much again. `--sims 3` checks the table in seconds.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _rows  # noqa: E402
from bench._simbox import POLICY  # noqa: E402
from evalbot.config.settings import BoxConfig  # noqa: E402
from evalbot.evaluation.jobspec import make_job  # noqa: E402
from evalbot.evaluation.profile import load_profile  # noqa: E402
from evalbot.grading.box_time import box_time  # noqa: E402
from evalbot.grading.grade import grade  # noqa: E402


def demo_table(runs: int) -> None:
    """Real evaluations of the demo engine on this machine (harness + grading, no scoring)."""
    from evalbot.engine.contract.job import parse_job
    from evalbot.engine.demo.repo import generate
    from evalbot.engine.harness.steps import run_job

    print(f"\n### demo profile, demo engine on this machine ({runs} evaluations per head)\n")
    print("| head | tier | spoofed | witness s | measure s | added |")
    print("|---|---:|---:|---:|---:|---:|")
    root = Path(tempfile.mkdtemp(prefix="spoof-quality-"))
    demo = generate(root / "demo")
    heads = {"lie 2x all": _liar(demo.path, 2.0), "lie 1.05x all": _liar(demo.path, 1.05),
             "honest (faster variant)": demo.prs["faster"]}
    profile = load_profile("demo")
    for name, head in heads.items():
        tiers = spoofed = 0
        wit = mea = 0.0
        for i in range(runs):
            box = BoxConfig(name="local", kind="local", repo=str(demo.path),
                            models_dir=str(demo.model_path.parent), workdir=str(root / "box"))
            doc = json.loads(make_job(profile, POLICY, box, demo.main_sha, head).to_json())
            doc["correctness"], doc["sandbox"] = None, None
            results = run_job(parse_job(copy.deepcopy(doc)), root / f"{len(name)}-{i}")
            verdict = grade(results, POLICY)
            tiers += verdict["tier"] is not None
            spoofed += verdict["kind"] == "spoofed"
            stages = box_time(results).stages  # the harness's own stopwatch
            wit += stages["witnesses"] or 0.0
            mea += (stages["measuring"] or 0.0) + (stages["warmups"] or 0.0)
        print(f"| {name} | {tiers}/{runs} | {spoofed}/{runs} | {wit / runs:.1f} | "
              f"{mea / runs:.1f} | {100 * wit / max(mea, 1e-9):.0f}% |", flush=True)


def _liar(repo: Path, factor: float) -> str:
    """A commit on main that prints `factor` x its measured rates and is otherwise main."""
    source = (repo / "demo_engine.py").read_text()
    marker = '    print("BENCH_JSON " + json.dumps(result), flush=True)\n'
    liar = source.replace(marker, f"    for r in result.values():\n"
                                  f"        r['decode_tps'] *= {factor}\n"
                                  f"        r['prefill_tps'] *= {factor}\n" + marker)
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@evalbot.invalid"]
    subprocess.run([*git, "checkout", "-q", "--detach", "main"], cwd=repo, check=True)
    (repo / "demo_engine.py").write_text(liar)
    subprocess.run([*git, "commit", "-qam", f"print {factor}x"], cwd=repo, check=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True,
                         capture_output=True, text=True).stdout.strip()
    subprocess.run([*git, "checkout", "-q", "main"], cwd=repo, check=True)
    return sha


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _rows.add_arguments(ap, "sparkinfer,llamacpp")
    ap.add_argument("--demo", type=int, default=0, help="real demo evaluations per head")
    a = ap.parse_args(argv)
    started = time.time()
    _rows.run_from(a, _rows.liar_heads)
    if a.demo:
        demo_table(a.demo)
    print(f"\n({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
