"""The handoff clock of a witness: the prompt reaches the process only after it says it is
ready, and the time runs from that write to the output line (engine.sandbox.proc.Handoff).

The stub engines are real processes through engine.sandbox.proc.run, as a witness runs."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.witness_spec import READY, WitnessSpec, parse_witness
from evalbot.engine.measure import witness, witness_output
from evalbot.engine.sandbox import proc

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
    assert witness_output.read_output_ids(done.output, _spec().output) == [i % 7 for i in prompt[-4:]]


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
        witness.handoff_of(_stepped(4, prompt_tokens=200_000), [999_999] * 200_004)


# A stepped witness that notes, before each answer, whether its next input was already there
# (it must never be: the harness writes it only after reading this answer), then answers the
# running sum of its inputs mod 1000 (an answer that needs every input so far).
STEPPED = textwrap.dedent(f"""
    import select, sys
    print({READY!r}, flush=True)
    total, early = sum(int(t) for t in sys.stdin.readline().split()), []
    while True:
        early.append(bool(select.select([sys.stdin], [], [], 0.05)[0]))
        print("EVALBOT_STEP", total % 1000, flush=True)
        line = sys.stdin.readline()
        if not line:
            break
        total += int(line)
    open("early.txt", "w").write(repr(early))
""")


def _stepped(steps: int, **kw: object) -> WitnessSpec:
    return _spec(steps=steps, output={"kind": "step_lines"}, output_tokens=steps + 1,
                 cells={"m/decode@64": steps}, **kw)


def _run_stepped(tmp_path: Path, script: str, spec: WitnessSpec, ids: list[int],
                 timeout_s: float = 60, **kw: object) -> proc.Finished:
    (tmp_path / "stub.py").write_text(script)
    return proc.run([sys.executable, str(tmp_path / "stub.py")], cwd=tmp_path,
                    timeout_s=timeout_s, log=tmp_path / "w.log", trusted=True,
                    handoff=witness.handoff_of(spec, ids), **kw)  # type: ignore[arg-type]


def test_a_stepped_witness_gets_each_id_only_after_its_previous_answer(tmp_path: Path) -> None:
    spec = _stepped(20)
    ids = witness._prompt(spec, tmp_path / "prompts")
    assert len(ids) == 8 + 20
    done = _run_stepped(tmp_path, STEPPED, spec, ids)
    assert done.ok and done.handoff_s is not None, done.output
    got = witness_output.read_output_ids(done.output, spec.output)
    assert got == [sum(ids[:8 + k]) % 1000 for k in range(21)]
    assert eval((tmp_path / "early.txt").read_text()) == [False] * 21


def test_a_long_prompt_reaches_the_process_whole(tmp_path: Path) -> None:
    # a 65536-id prompt (a prefill@65536 witness) is ~4 times Linux's default 64 KiB pipe: the pipe
    # grows to hold it, so the one write is whole and the process answers from every id
    spec = _stepped(3, prompt_tokens=65_536)
    ids = witness._prompt(spec, tmp_path / "prompts")
    assert len(witness.handoff_of(spec, ids).prompt) > 3 * proc.PIPE_DEFAULT
    done = _run_stepped(tmp_path, STEPPED, spec, ids)
    assert done.ok and done.handoff_s is not None, done.output[-500:]
    got = witness_output.read_output_ids(done.output, spec.output)
    assert got == [sum(ids[:65_536 + k]) % 1000 for k in range(4)]


def test_a_head_that_waits_for_two_steps_to_batch_them_never_finishes(tmp_path: Path) -> None:
    """The batching attack: read ahead to run two steps as one pass. The second id is never
    written before the first answer is read, so the process waits until its timeout: no time,
    no verified output."""
    script = textwrap.dedent(f"""
        import sys
        print({READY!r}, flush=True)
        sys.stdin.readline()
        print("EVALBOT_STEP 0", flush=True)
        batch = [sys.stdin.readline(), sys.stdin.readline()]  # waits for an id never sent
        print("EVALBOT_STEP 1", flush=True)
    """)
    done = _run_stepped(tmp_path, script, _stepped(4), list(range(12)), timeout_s=5)
    assert done.timed_out and done.handoff_s is None


ORPHAN = textwrap.dedent(f"""
    import os, sys, time
    print({READY!r}, flush=True)
    if os.fork():
        os._exit(0)  # the parent leaves at once: its own CPU time is nothing
    prompt = sys.stdin.readline()
    for _ in range({{steps}} + 1):
        end = time.process_time() + 0.02
        while time.process_time() < end:
            pass
        print("EVALBOT_STEP 0", flush=True)
        sys.stdin.readline()
""")


def test_the_cpu_clock_counts_an_orphan_s_work(tmp_path: Path) -> None:
    """The forking head: the witness process forks and exits, its orphan does the work. The
    run's cgroup counts the orphan's CPU time (RUSAGE_CHILDREN, the clock before, saw none of
    it)."""
    from evalbot.engine.sandbox import cpu_meter

    if not cpu_meter.available():
        pytest.skip("this machine lets the harness make no cgroup (the handoff clock is tested "
                    "without one below)")
    spec = _stepped(10, clock="cpu")
    done = _run_stepped(tmp_path, ORPHAN.replace("{steps}", "10"), spec, list(range(18)),
                        cpu_clock=True)
    assert done.cpu_s is not None and done.cpu_s >= 11 * 0.02, done


def test_without_a_cgroup_the_handoff_clock_still_times_the_orphan(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unprivileged harness makes no cgroup: the witness falls back to the handoff clock,
    which runs from the prompt's write to the last answer's read, whoever computed it."""
    from evalbot.engine.sandbox import cpu_meter

    monkeypatch.setattr(cpu_meter, "HIERARCHIES", ((tmp_path / "no-cgroups", "cpu.stat", 1e-6),))
    assert not cpu_meter.available()
    done = _run_stepped(tmp_path, ORPHAN.replace("{steps}", "10"), _stepped(10), list(range(18)))
    assert done.ok and done.handoff_s is not None and done.handoff_s >= 11 * 0.02
    assert done.cpu_s is None
