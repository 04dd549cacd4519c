"""The sparkinfer profile against real outputs of its engine (tests/data/sparkinfer/, recorded on
the H200 at sparkinfer ba8add3 with the synthetic models by scripts/gpu_sparkinfer_measure.sh, since
replaced by scripts/gpu_run.sh)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.resources import LABELS_FILE as LABELS
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.job import Cell, SpeedRun
from evalbot.engine.measure.parsing import ParseError, read_rates, read_score_lines
from evalbot.engine.measure.speed import Measurement, SampleFailure
from evalbot.engine.sides.build import Built
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import ProfileRun, load_profile
from evalbot.grading.policy import load_labels

DATA = Path(__file__).parent / "data" / "sparkinfer"
SHA = "a" * 40
KNOB = "SPARKINFER_PREFILL_BATCHED_MAXCTX=131072"


def runs() -> tuple[ProfileRun, ...]:
    return load_profile("sparkinfer").runs


def rates(run: ProfileRun, fixture: str) -> dict[str, float]:
    cells = [Cell(run.model, c.metric, c.ctx) for c in run.cells]
    return read_rates((DATA / fixture).read_text(), run.parse, cells)


def measurement(tmp_path: Path) -> Measurement:
    box = BoxConfig(name="local", kind="local", workdir=str(tmp_path), repo=str(tmp_path))
    job = make_job(load_profile("sparkinfer"), load_labels(LABELS).policy("default"), box,
                   SHA, SHA)
    return Measurement(job, {}, tmp_path, tmp_path)


def recorded_wall(name: str) -> float:
    rows = [json.loads(line) for line in (DATA / "h200-alternating-sweeps.jsonl").read_text()
            .splitlines()]
    return float(next(r["wall"] for r in rows if r["name"] == name))


def test_the_sweep_reads_every_cell_of_the_recorded_sweep() -> None:
    sweep = runs()[0]
    assert rates(sweep, "sweep-ba8add3-h200-qwythos-synth.log") == {
        "qwythos-9b/decode@128": 357.6134, "qwythos-9b/decode@4096": 344.1846,
        "qwythos-9b/decode@32768": 340.5364, "qwythos-9b/decode@65536": 338.9515,
        "qwythos-9b/prefill@4096": 6399.5613, "qwythos-9b/prefill@32768": 4575.7591,
        "qwythos-9b/prefill@65536": 4591.7973}


def test_131072_is_its_own_run_with_the_batched_prefill_knob() -> None:
    sweep, long_run = runs()[0], runs()[1]
    assert {c.ctx for c in sweep.cells} == {128, 4096, 32768, 65536}
    assert {(c.metric, c.ctx) for c in long_run.cells} == {("prefill", 131072)}
    # The knob is the only difference between the two invocations, and it comes before the
    # binary (env's arguments), so the engine reads it; the sweep never sets it.
    assert [a for a in long_run.argv if a != KNOB] == list(sweep.argv)
    assert long_run.argv.index(KNOB) < long_run.argv.index(sweep.argv[2])
    assert rates(long_run, "sweep-131072-batched-maxctx-h200-qwythos-synth.log") == {
        "qwythos-9b/prefill@131072": 4585.9619}


def test_the_131072_run_asks_the_engine_for_131072_alone(tmp_path: Path) -> None:
    m = measurement(tmp_path)
    built = Built("base", SHA, True, 0.0, False, tmp_path)
    long_run = m.job.runs[1]
    argv = [m._fill(a, long_run, built) for a in long_run.argv]
    assert "SPARKINFER_BENCH_SWEEP_CTXS=131072" in argv and KNOB in argv
    sweep = [m._fill(a, m.job.runs[0], built) for a in m.job.runs[0].argv]
    assert "SPARKINFER_BENCH_SWEEP_CTXS=128,4096,32768,65536" in sweep and KNOB not in sweep


def test_a_prefill_the_engine_did_not_time_is_an_error_not_a_pass() -> None:
    # bench prints 0.0 for a fill it did not time; the existing bot passed such a gate.
    out = (DATA / "sweep-131072-batched-maxctx-h200-qwythos-synth.log").read_text()
    untimed = out.replace('"prefill_pp":4585.9619', '"prefill_pp":0.0000')
    assert untimed != out
    with pytest.raises(ParseError, match="not a positive"):
        read_rates(untimed, runs()[1].parse, [Cell("qwythos-9b", "prefill", 131072)])


def test_the_moe_run_reads_the_qwen35moe_model_the_engine_loaded() -> None:
    moe = runs()[2]
    out = (DATA / "sweep-h200-qwen36-synth-4layer.log").read_text()
    assert "256 experts top-8" in out
    got = read_rates(out, moe.parse, [Cell(moe.model, m, c) for m in ("decode", "prefill")
                                      for c in (512, 4096)])
    assert got["qwen3.6-35b-a3b/prefill@4096"] == 4635.2749
    # The recorded sweep stopped at 4096: a profile context it did not run is an error.
    with pytest.raises(ParseError, match="16384"):
        read_rates(out, moe.parse, [Cell(moe.model, "decode", 16384)])


@pytest.mark.parametrize(("index", "name"), [(0, "r1-a"), (1, "k131072-a")])
def test_honest_recorded_samples_pass_the_wall_time_check(tmp_path: Path, index: int,
                                                          name: str) -> None:
    m = measurement(tmp_path)
    run: SpeedRun = m.job.runs[index]
    fixture = {"r1-a": "sweep-ba8add3-h200-qwythos-synth.log",
               "k131072-a": "sweep-131072-batched-maxctx-h200-qwythos-synth.log"}[name]
    honest = read_rates((DATA / fixture).read_text(), run.parse, run.cells)
    m._check_timing(run, honest, recorded_wall(name), "head", tmp_path / "log")
    # The same rates from a process that ran for less time than they imply are refused.
    implied = sum((c.ctx if c.metric == "prefill" else 128) / honest[c.key] for c in run.cells)
    assert implied < recorded_wall(name)
    with pytest.raises(SampleFailure, match="imply"):
        m._check_timing(run, honest, 0.9 * implied, "head", tmp_path / "log")


def test_the_score_tool_output_and_generate_agree_on_the_greedy_tokens() -> None:
    prompt = (DATA / "prompt-ids.txt").read_text().split()
    window = read_score_lines((DATA / "score-short-h200-qwythos-synth.log").read_text(), 8)[0]
    generated = [int(t) for t in (DATA / "generate-short-h200-qwythos-synth.log").read_text()
                 .split("OUTPUT_IDS:")[1].split()]
    assert len(window["argmax"]) == len(prompt) + len(generated) - 1
    assert window["argmax"][len(prompt) - 1:] == generated


def test_the_broken_head_changes_every_argmax_of_the_short_window() -> None:
    main = read_score_lines((DATA / "score-short-h200-qwythos-synth.log").read_text(), 8)[0]
    broken = read_score_lines(
        (DATA / "score-short-broken-head-h200-qwythos-synth.log").read_text(), 8)[0]
    assert len(main["argmax"]) == len(broken["argmax"]) == 95
    assert sum(a == b for a, b in zip(main["argmax"], broken["argmax"], strict=True)) == 0


def test_the_slow_head_slows_prefill_at_4096_and_nothing_else() -> None:
    sweep = runs()[0]
    main = rates(sweep, "sweep-ba8add3-h200-qwythos-synth.log")
    slow = rates(sweep, "sweep-slow-prefill-head-h200-qwythos-synth.log")
    change = {k: slow[k] / main[k] - 1 for k in main}
    assert change.pop("qwythos-9b/prefill@4096") < -0.25
    assert all(abs(v) < 0.005 for v in change.values()), change


def test_the_score_tool_is_sized_for_the_longest_window_and_scores_int8_kv() -> None:
    p = load_profile("sparkinfer")
    assert p.correctness is not None
    longest = max(p.correctness.window_tokens, p.correctness.long_window_tokens)
    assert int(p.env["SPARKINFER_SCORE_MAX_SEQ"]) >= longest
    assert p.env["SPARKINFER_KV_INT8"] == "1"
    # after the engine's build, evalbot's witness tool against the same tree, hashed with it
    assert p.build_argv[:2] == ("{python}", "{harness}/engine/sparkinfer/build_witness.py")
    assert "evalbot-out/evalbot-sparkinfer-witness" in p.artifacts


def _profile_writer() -> Any:
    """scripts/gpu_runner/profiles.py, the e2e profile writer of the GPU runner (not a package)."""
    import importlib.util
    import sys

    scripts = Path(__file__).parents[1] / "scripts"
    if str(scripts) not in sys.path:  # it imports its package's llama_witnesses as gpu_runner's
        sys.path.insert(0, str(scripts))
    script = scripts / "gpu_runner" / "profiles.py"
    spec = importlib.util.spec_from_file_location("gpu_runner_profiles", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_phase_2_floors_are_main_s_own_and_main_clears_them() -> None:
    """Phase 2's A/A was an infra-error because main (random weights: top-1 0.057, KL 0.0009)
    sat below the policy's compatible floors; the e2e profile's floors come from main's own
    sections, and with them the same A/A grades as inert (a pass) for both models."""
    from evalbot.grading import correctness_policy

    module = _profile_writer()
    floors = module.calibrated_floors()
    assert 0 < floors["top1"] < 0.06 and 0 < floors["kl"] < 0.01
    results = json.loads(module.PHASE2_AA.read_text())
    policy = load_labels(LABELS).policy("default").correctness
    for section in [results["correctness"], *results["correctness_guards"]]:
        assert correctness_policy.decide(section, policy)["decision"] == "infra-error"
        decided = correctness_policy.decide({**section, "floors": floors}, policy)
        assert decided["decision"] == "inert", decided.get("reasons")  # bit-identical: inert


PHASE2 = Path(__file__).parent / "data" / "sparkinfer"


def _phase2(name: str) -> dict:
    return json.loads((PHASE2 / f"phase2-{name}-h200.results.json").read_text())


def _grade(results: dict) -> dict:
    from evalbot.grading.grade import grade

    return grade(results, load_labels(LABELS).policy("default"))


@pytest.mark.parametrize("name, kind, moved", [
    ("aa", "neutral", {}),
    ("slow", "regressed", {"qwythos-9b/prefill@4096": "regressed"}),
    ("broken", "incorrect", {}),
])
def test_the_gpu_evaluations_grade_as_they_were_published(name: str, kind: str,
                                                           moved: dict) -> None:
    """Phase 2 on the H200 (docs/gpu-e2e.md): the A/A neutral in every cell, the slowed
    prefill regressed and nothing else, the broken head rejected on correctness."""
    verdict = _grade(_phase2(name))
    assert verdict["kind"] == kind
    assert {c["key"]: c["decision"] for c in verdict["cells"]
            if c["decision"] != "neutral"} == moved


def test_a_witness_that_never_runs_the_batched_prefill_does_not_judge_it() -> None:
    """The speedup head (the slow prefill reverted: +40% at prefill@4096, real) was REJECTed as
    spoofed: qwen3_gguf_generate fills its prompt one token at a time, so the witness that
    covered prefill@4096 took 15.2 s on both sides. Its decode steps alone leave the cell
    unconfirmed: no tier, and no REJECT. The shipped witness of that cell is evalbot's own tool
    in its prefill mode, which runs prefill_batched on the cell's whole prompt."""
    results = _phase2("speedup")
    assert _grade(results)["kind"] == "spoofed"  # as it ran, with the old witness cells
    for record in results["witnesses"]:
        if record["source"] == "witness":
            record["cells"] = {"qwythos-9b/decode@128": 2048}
    verdict = _grade(results)
    cells = {c["key"]: c["decision"] for c in verdict["cells"]}
    assert verdict["kind"] != "spoofed" and cells["qwythos-9b/prefill@4096"] == "unconfirmed"
    shipped = load_profile("sparkinfer")
    witnesses = [w for r in shipped.runs for w in r.witnesses]
    assert not any("qwen3_gguf_generate" in " ".join(w.argv) for w in witnesses)
    (prefill,) = [w for w in witnesses if "qwythos-9b/prefill@4096" in w.cells]
    assert prefill.argv[:2] == ["{build}/evalbot-out/evalbot-sparkinfer-witness", "prefill"]
    assert (prefill.prompt_tokens, prefill.cells, prefill.clock) == (
        4096, {"qwythos-9b/prefill@4096": 4096}, "handoff")
