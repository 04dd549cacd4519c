"""The GPU runner's set-up stages (scripts/gpu_stages.sh) run each in a fresh bash that sees
exactly the settings the chain passes (gpu_runner.chain.stage_env): a setting a stage reads that
the chain does not pass is silently empty there. The 2026-12-06 run lost its stable Qwythos file
that way (STABLE_SYNTH, set at the top of the script before the runner and never exported:
docs/gpu-e2e.md, "A verdict in minutes, second run")."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))

from gpu_runner.catalogue import evaluations_of  # noqa: E402
from gpu_runner.chain import Config, stage_env  # noqa: E402

# bash's own, and settings read only with a default (${NAME:-...}: absent is a value)
BASH = {"PIPESTATUS"}


def _functions(text: str) -> dict[str, str]:
    """name -> body of each function written over several lines (`name() {  # comment`)."""
    return dict(re.findall(r"^(\w+)\(\) \{[ \t]*(?:#[^\n]*)?\n(.*?)^\}", text, flags=re.S | re.M))


def _reads(body: str) -> set[str]:
    defaulted = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*):-", body))
    return set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", body)) - defaulted - BASH


def test_every_setting_a_stage_reads_is_passed_by_the_chain() -> None:
    text = (SCRIPTS / "gpu_stages.sh").read_text()
    functions = _functions(text)
    assert {"stage_setup", "stage_box", "stage_model", "stage_reference", "stage_sandbox_ab",
            "carried_reference_runs"} <= set(functions)  # the parse sees the stages
    cfg = Config("51", tuple(evaluations_of("51")), 100, False, Path("/r"), Path("/w"), Path("/s"),
                 "python3", 2)
    passed = set(stage_env(cfg))
    reads = {name: _reads(body) for name, body in functions.items()}
    assert "SYNTH" in reads["stage_model"] and "REF_KEY" in reads["stage_reference"]
    assert {name: sorted(r - passed) for name, r in reads.items() if r - passed} == {}


def test_the_stage_library_sets_nothing_at_the_top() -> None:
    # sourced by every stage: a top-level setting would be a second, unexported source of truth
    text = (SCRIPTS / "gpu_stages.sh").read_text()
    outside = re.sub(r"^\w+\(\) \{.*\}$", "", text, flags=re.M)  # one-line helpers
    outside = re.sub(r"^\w+\(\) \{.*?^\}", "", outside, flags=re.S | re.M)
    code = [line for line in outside.splitlines() if line.strip() and not line.startswith("#")]
    assert code == []


def test_the_stable_file_is_chosen_by_the_run_not_by_the_environment() -> None:
    runs = {run: stage_env(Config(run, tuple(evaluations_of(run)), 100, False, Path("/r"),
                                  Path("/w"), Path("/s"), "python3", 2)) for run in ("49", "51", "52")}
    assert (runs["49"]["SYNTH"], runs["51"]["SYNTH"]) == ("random", "stable")
    assert runs["52"]["ENGINE"] == "llamacpp" and runs["51"]["ENGINE"] == "sparkinfer"
    body = _functions((SCRIPTS / "gpu_stages.sh").read_text())["stage_model"]
    assert '"$SYNTH" = stable' in body and "--branch-scale 0.001" in body


def test_the_model_stage_writes_the_qwen36_file_each_run_reads(tmp_path: Path) -> None:
    # the stage as the chain runs it, with a stand-in python that records each synthesizer's
    # arguments and writes an empty file where the real one writes the model
    fake = tmp_path / "py"
    fake.write_text('#!/bin/sh\necho "${1##*/} $*" >> "$W/calls"; : > "$3"\n')
    fake.chmod(0o755)
    (tmp_path / "s").mkdir()
    for name in ("ggml-vocab-qwen35.gguf", "synth_qwen35.py"):
        (tmp_path / "s" / name).touch()
    made = {}
    for run in ("50", "53S", "53Q"):
        work = tmp_path / run
        (work / "log").mkdir(parents=True)
        cfg = Config(run, tuple(evaluations_of(run)), 100, False, SCRIPTS.parent, work, tmp_path / "s",
                     str(fake), 2)
        subprocess.run(["bash", "-c", ". scripts/gpu_stages.sh && stage_model"], cwd=SCRIPTS.parent,
                       env=stage_env(cfg), check=True, capture_output=True)
        calls = (work / "calls").read_text().splitlines()
        made[run] = {c.split()[3].rsplit("/", 1)[1]: c.split()[4:] for c in calls}
        sums = (work / "log" / "models.sha256").read_text()
        assert sorted(line.split()[1] for line in sums.splitlines()) == sorted(made[run]), run
    q4 = ["--outtype", "q4_k_m"]
    assert made["50"] == made["53S"] == {"qwythos-synth.gguf": q4,
                                         "qwen36-synth-4l.gguf": [*q4, "--qwen36", "--layers", "4"]}
    # the real shape: the synthesizer's --qwen36 default, 40 layers
    assert made["53Q"] == {"qwythos-synth.gguf": q4, "qwen36-synth.gguf": [*q4, "--qwen36"]}
