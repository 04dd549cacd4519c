"""The handoff clock of a witness: the prompt reaches the process only after it says it is
ready, and the time runs from that write to the output line (engine.sandbox.proc.Handoff).

The stub engines are real processes through engine.sandbox.proc.run, as a witness runs."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from engine.contract.checks import ContractError
from engine.contract.witness_spec import READY, WitnessSpec, parse_witness
from engine.measure import witness
from engine.sandbox import proc

# A stub witness engine: "loads" (a fixed amount of CPU work, timed by its own monotonic clock,
# which on Linux is the harness's too), notes whether anything was on stdin before it said READY,
# answers each id mod 7 and notes how long that took. Its notes go to files the test reads.
STUB = textwrap.dedent(f"""
    import select, sys, time
    t0 = time.monotonic()
    sum(i * i for i in range(2_000_000))  # the load
    early = bool(select.select([sys.stdin], [], [], 0)[0])
    open("load_s.txt", "w").write(repr(time.monotonic() - t0))
    open("early.txt", "w").write(str(early))
    print({READY!r}, flush=True)
    ids = [int(t) for t in sys.stdin.readline().split()]
    t1 = time.monotonic()
    answer = " ".join(str(i % 7) for i in ids[-4:])
    open("work_s.txt", "w").write(repr(time.monotonic() - t1))
    print("OUTPUT_IDS: " + answer, flush=True)
""")


def _spec(**kw: object) -> WitnessSpec:
    doc = {"name": "w", "argv": ["stub", "-"], "cells": {"m/decode@64": 4}, "prompt_tokens": 8,
           "output": {"kind": "ids_line", "prefix": "OUTPUT_IDS:"}, "output_tokens": 4,
           "clock": "handoff", **kw}
    return parse_witness(doc, "witness", {"m/decode@64"})


def _run(tmp_path: Path, script: str, prompt: list[int]) -> proc.Finished:
    (tmp_path / "stub.py").write_text(script)
    handoff = witness.handoff_of(_spec(), prompt)
    return proc.run([sys.executable, str(tmp_path / "stub.py")], cwd=tmp_path, timeout_s=60,
                    log=tmp_path / "w.log", trusted=True, handoff=handoff)


def test_the_clock_runs_from_the_handoff_to_the_output_line(tmp_path: Path) -> None:
    prompt = [11, 12, 13, 14, 15, 16, 17, 18]
    done = _run(tmp_path, STUB, prompt)
    assert done.ok and done.handoff_s is not None
    # the load before READY is outside the clock, the work after the prompt inside it
    assert done.wall_s - done.handoff_s >= float((tmp_path / "load_s.txt").read_text()) > 0
    assert done.handoff_s >= float((tmp_path / "work_s.txt").read_text())
    assert witness.read_output_ids(done.output, _spec().output) == [i % 7 for i in prompt[-4:]]


def test_the_process_cannot_have_the_prompt_before_it_is_ready(tmp_path: Path) -> None:
    done = _run(tmp_path, STUB, list(range(8)))
    assert done.ok
    assert (tmp_path / "early.txt").read_text() == "False"  # nothing on stdin before READY
    prompts = tmp_path / "prompts"
    ids = witness._prompt(_spec(), prompts)  # the harness's draw for a handoff witness
    assert len(ids) == 8 and not prompts.exists()  # never written where the sandbox could read


@pytest.mark.parametrize("script", [
    "print('OUTPUT_IDS: 1 2 3 4')",  # answers without ever saying it is ready
    f"print({READY!r}, flush=True)\nimport sys\nsys.stdin.readline()",  # ready, then no output
])
def test_no_handoff_no_time(tmp_path: Path, script: str) -> None:
    done = _run(tmp_path, script, list(range(8)))
    assert done.handoff_s is None  # speed.Measurement records this sample as unverified


def test_a_process_that_stops_reading_does_not_hang_the_harness(tmp_path: Path) -> None:
    script = f"import os\nprint({READY!r}, flush=True)\nos.close(0)\nprint('OUTPUT_IDS: 0')"
    done = _run(tmp_path, script, list(range(8)))
    assert not done.timed_out and done.returncode == 0


def test_a_handoff_witness_takes_no_prompt_in_its_argv() -> None:
    with pytest.raises(ContractError, match="stdin"):
        _spec(argv=["stub", "{prompt}"])
    with pytest.raises(ValueError, match="exceeds"):
        witness.handoff_of(_spec(), [999] * 20_000)
