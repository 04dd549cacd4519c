"""Every bench in a short form, so none rots unseen (issue 34): each runs as the README says, with
small counts, and must exit 0 with its table. The figures are not checked here (the benches'
own targets print beside them); that a bench still runs against the current code is.
verdict_quality and spoof_quality have their own smoke tests (tests/test_bench_paces.py), and
box_time its own (tests/test_bench_box_time.py), witness_quality its own
(tests/test_witness_quality_bench.py), demo_under_load its own (tests/test_demo_e2e.py's broken
PR, whose outputs it checks);
suite_under_load runs this suite itself and is left to people."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# bench -> (short arguments, a line its table must print)
SHORT = {
    "intake.py": (["--short"], "deliveries"),
    "publication_restart.py": (["--short"], "-> published (s)"),
    "slow_clients.py": (["8", "10"], "p99"),
    "sparkinfer_noise.py": ([], "decode"),
    "guard_quality.py": (["--inert", "20", "--sims", "10", "--profile", "demo"], "|"),
    "calibration_limits.py": ([], "sparkinfer-compat"),
    "cost_floor.py": ([], "| llamacpp-e2e-cuda |"),
    "hidden_cost.py": (["--box", "2", "--sims", "1", "--aa-sims", "1", "--profiles", "llamacpp"],
                       "| A/A | 1 |"),
    "fault_quality.py": (["--sims", "3", "--aa-sims", "3", "--profiles", "sparkinfer"],
                         "| sparkinfer | slow first | A/A | 3 |"),
    "demo_witness_looks.py": (["--trials", "20"], "| shipped | 3 6 12 33 | 0.19 | 0.06 |"),
    "wall_clock_aa.py": (["--draws", "2000", "--check", "50"], "| 0 of 50 differ |"),
}


@pytest.mark.parametrize("bench", sorted(SHORT))
def test_the_bench_runs_in_its_short_form(bench: str) -> None:
    args, expect = SHORT[bench]
    done = subprocess.run([sys.executable, str(ROOT / "bench" / bench), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (bench, done.stdout[-2000:], done.stderr[-3000:])
    assert expect in done.stdout, (bench, done.stdout[-2000:])


@pytest.mark.parametrize("bench", sorted(p.name for p in (ROOT / "bench").glob("*.py")
                                         if not p.name.startswith("_")))
def test_every_bench_answers_help_with_its_usage(bench: str) -> None:
    """`--help` is read as an option, never as a count or a file (two benches once raised a
    ValueError or a FileNotFoundError on it)."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / bench), "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage:"), (bench, done.stderr[-2000:])


def test_a_bad_count_is_refused_with_a_usage_line() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "intake.py"), "many"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "invalid int value: 'many'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_every_bench_is_run_somewhere() -> None:
    smoked = set(SHORT) | {"verdict_quality.py", "spoof_quality.py", "box_time.py",
                           "suite_under_load.py", "witness_quality.py",
                           "demo_under_load.py"}
    benches = {p.name for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_")}
    assert benches <= smoked, sorted(benches - smoked)
