"""The benches simulate each profile at the pace its fixtures measured (bench/_paces.py), not at
constants of their own; and both still print their table.

The fixture paces are read here on their own (not through bench/_paces.py), so a bench whose
pace drifts from what the box measured (the 63 s Qwythos sweep verdict_quality.py once assumed
against the measured 25.5 s) fails here."""

from __future__ import annotations

import csv
import io
import json
import re
import statistics
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from bench import _paces, _rows, _simbox, spoof_quality, verdict_quality
from evalbot.evaluation.profile import load_profile

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
TOLERANCE = 0.20
H200_SWEEP_S = 25.5  # issue 29's H200 fact beside the fixture: a Qwythos sweep ~25.5 s


def fixture_sample_s(profile: str, model: str, ctxs: set[int]) -> float | None:
    """A run's sample process time as its fixture recorded it; None: no fixture."""
    if profile == "llamacpp":
        doc = json.loads((DATA / "llamacpp" / "h200-aa.results.json").read_text())
        cell = next(c for c in doc["cells"] if c["model"] == model)
        return statistics.mean(s["wall_s"] for s in cell["samples"] if not s["dropped"])
    if profile == "sparkinfer" and model == "qwythos-9b":
        rows = [json.loads(ln) for ln in (DATA / "sparkinfer" / "h200-alternating-sweeps.jsonl")
                .read_text().splitlines() if ln.strip()]
        walls = [float(r["wall"]) for r in rows if {int(k) for k in r["r"]} == ctxs
                 and not r["name"].startswith("slow")]
        return statistics.mean(walls)
    return None


def fixture_witness_s(profile: str, name: str) -> tuple[float, float] | None:
    """A witness process's (clock seconds, wall seconds) where a fixture timed that very
    witness (sparkinfer: its own tool on the synthetic Qwythos; not the 4-layer Qwen3.6 file;
    llamacpp: the shipped witness on the H200, the depth witnesses on GPU run 53L's H100)."""
    if profile == "llamacpp" and name != "prefill-4k-decode-896":
        doc = json.loads((DATA / "llamacpp" / "h100-53L" / "witness-aa.results.json").read_text())
        [w] = [w for w in doc["witnesses"] if w["name"] == name]
        rows = [{"handoff_s": s["seconds"], "wall_s": s["wall_s"]} for s in w["samples"]
                if s["verified"] and not s["dropped"]]
    elif profile == "llamacpp":
        tsv = (DATA / "llamacpp" / "h200-witness-aa.tsv").read_text()
        rows = [r for r in csv.DictReader(io.StringIO(tsv), delimiter="\t")
                if r["variant"] == "nofa"]
    elif profile == "sparkinfer":
        lines = (DATA / "sparkinfer" / "witness-h200-timings.jsonl").read_text().splitlines()
        rows = [r for r in map(json.loads, filter(str.strip, lines))
                if r.get("model") == "qwythos" and r["witness"] == name]
    else:
        return None
    if not rows:
        return None
    return (statistics.mean(float(r["handoff_s"]) for r in rows),
            statistics.mean(float(r["wall_s"]) for r in rows))


def runs_with_fixtures() -> list[tuple[str, str, frozenset[int]]]:
    out = []
    for name in ("llamacpp", "sparkinfer"):
        for run in load_profile(name).runs:
            ctxs = frozenset(c.ctx for c in run.cells)
            if fixture_sample_s(name, run.model, set(ctxs)) is not None:
                out.append((name, run.model, ctxs))
    return out


def close(got: float, want: float) -> bool:
    return abs(got - want) <= TOLERANCE * want


def job_run(profile: str, model: str, ctxs: frozenset[int], tmp: Path):
    evaluator = _simbox.Evaluator(load_profile(profile), _simbox.World(profile), tmp)
    return evaluator, next(r for r in evaluator.job.runs
                           if r.model == model and {c.ctx for c in r.cells} == ctxs)


@pytest.mark.parametrize(("profile", "model", "ctxs"), runs_with_fixtures())
def test_each_bench_samples_at_the_fixture_pace(profile, model, ctxs, tmp_path) -> None:
    want = fixture_sample_s(profile, model, set(ctxs))
    evaluator, run = job_run(profile, model, ctxs, tmp_path)
    paces = {"verdict_quality rule table": verdict_quality.pace_s(profile, run),
             "simulated box (both benches)": evaluator.world.sample_s(run)}
    # and the wall times the simulated box's sample processes actually take
    box = _simbox.SimulatedBox(evaluator.job, evaluator.world, _simbox.Head("main"),
                               np.random.default_rng(0), tmp_path)
    walls = [next(iter(box._sample(run, "base")[0].values()))["wall_s"] for _ in range(20)]
    paces["simulated sample processes"] = statistics.mean(walls)
    off = {k: v for k, v in paces.items() if not close(v, want)}
    assert not off, f"{profile}/{model}: fixture {want:.1f} s a sample, benches {off}"


@pytest.mark.parametrize("profile", ["llamacpp", "sparkinfer"])
def test_each_witness_runs_at_the_fixture_pace(profile, tmp_path) -> None:
    evaluator = _simbox.Evaluator(load_profile(profile), _simbox.World(profile), tmp_path)
    checked, assumed = [], []
    for run in evaluator.job.runs:
        for spec in run.witnesses:
            pace = evaluator.world.witness(run, spec)
            want = fixture_witness_s(profile, spec.name)
            if want is None:
                assumed.append(spec.name)
                assert pace.assumed, f"{spec.name}: no fixture, yet its pace is not 'assumed'"
                continue
            got = (pace.seconds, pace.wall_s)
            assert not pace.assumed and all(map(close, got, want)), \
                f"{spec.name}: fixture {want} s (clock, wall), bench {got} s"
            checked.append(spec.name)
    assert checked, f"no witness of {profile} has a fixture"
    if profile == "sparkinfer":  # every Qwythos witness but the two long prefills was measured
        assert set(assumed) == {"prefill-32768", "prefill-65536", "qwen36-prefill-4096-decode-512",
                                "qwen36-prefill-512", "qwen36-decode-512", "qwen36-decode-4096",
                                "qwen36-decode-128"}


def test_the_unmeasured_long_prefills_are_the_measured_one_with_a_longer_prompt(tmp_path) -> None:
    """prefill-32768/65536 (no process measured): the sweep's rate at that context for the
    prompt, prefill-4096's measured rest; the header says "pace assumed" beside them."""
    evaluator, run = job_run("sparkinfer", "qwythos-9b", frozenset({128, 4096, 32768, 65536}),
                             tmp_path)
    paces = {s.name: evaluator.world.witness(run, s) for s in run.witnesses}
    sweep = evaluator.world.run(run).rates
    clock, _ = fixture_witness_s("sparkinfer", "prefill-4096")
    for ctx in (32768, 65536):
        want = clock + ctx / sweep[f"prefill@{ctx}"] - 4096 / sweep["prefill@4096"]
        assert close(paces[f"prefill-{ctx}"].seconds, want)
    header = _rows.pace_header(_rows.Variant("sparkinfer", load_profile("sparkinfer"),
                                             "sparkinfer"), None)
    part = next(p for p in header.split("; ") if p.startswith("witness prefill-32768"))
    assert "pace assumed" in part
    assert "pace assumed" not in next(p for p in header.split("; ")
                                      if p.startswith("witness decode-128"))


def test_the_qwythos_sweep_is_the_h200_pace_not_an_assumed_one(tmp_path) -> None:
    evaluator, run = job_run("sparkinfer", "qwythos-9b", frozenset({128, 4096, 32768, 65536}),
                             tmp_path)
    pace = evaluator.world.run(run)
    assert not pace.assumed and close(evaluator.world.sample_s(run), H200_SWEEP_S)


def test_every_shipped_run_s_pace_is_measured_and_the_header_says_an_assumed_one() -> None:
    """Qwen3.6's run was assumed from the 4-layer file until GPU run 53Q measured it at its real
    shape (tests/test_sparkinfer_q53_h100.py); a pace without a fixture still says so."""
    variant = _rows.Variant("sparkinfer", load_profile("sparkinfer"), "sparkinfer")
    header = _rows.pace_header(variant, None)
    for model in ("qwen3.6-35b-a3b@", "qwythos"):
        assert "pace assumed" not in next(p for p in header.split("; ") if p.startswith(model))
    guess = _paces.RunPace(120.0, 0.04, {"decode": 440.0}, {"decode": 0.002},
                           _paces.ASSUMED + ": x")
    assert guess.assumed and guess.note() == "pace assumed"


ROW = re.compile(r"^\| (?P<head>[^|]+) \| (?P<true>[^|]+) \| (?P<n>\d+) \| (?P<tier>[\d.]+)% \| "
                 r"(?P<higher>[\d.]+)% \| (?P<inconc>[\d.]+)% \| (?P<spoofed>[\d.]+)% \| "
                 r"(?P<box>\d+) \| [^|]+ \| [^|]+ \|$")


def tables(out: str) -> dict[str, list[re.Match[str]]]:
    """Each table's title and rows (its per-stage rows after it: tests/test_bench_box_time.py)."""
    found: dict[str, list[re.Match[str]]] = {}
    title, stages = "", False
    for ln in out.splitlines():
        if ln.startswith("### "):
            title, stages = ln[4:], False
            found[title] = []
        elif ln.startswith("box seconds per stage"):
            stages = True
        elif ln.startswith("| ") and not ln.startswith("| head") and not stages:
            match = ROW.match(ln)
            assert match, f"a row not in the table's shape: {ln!r}"
            found[title].append(match)
    return found


def run_bench(main, argv: list[str]) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        main(argv)
    return buf.getvalue()


def test_spoof_quality_prints_a_row_per_liar_per_profile_and_pace() -> None:
    out = run_bench(spoof_quality.main, ["--sims", "1", "--liar-sims", "1", "--jobs", "1",
                                         "--heads", "2x all,junk tail 0.5",
                                         "--paces", "measured,60"])
    found = tables(out)
    assert set(found) == {f"{v}, sample pace {p}" for v in
                          ("sparkinfer", "sparkinfer, qwythos-9b only", "llamacpp")
                          for p in ("measured", "60 s")}
    for rows in found.values():
        assert [r["head"] for r in rows] == ["lie 2x all", "junk tail 0.5"]
        assert all(int(r["n"]) == 1 and r["true"] == "-" for r in rows)


def test_verdict_quality_prints_honest_heads_per_model_and_metric_and_the_aa() -> None:
    out = run_bench(verdict_quality.main, ["--sims", "1", "--liar-sims", "1", "--jobs", "1",
                                           "--profiles", "sparkinfer", "--heads",
                                           "decode +10%,A/A"])
    found = tables(out)
    assert set(found) == {"sparkinfer, sample pace measured",
                          "sparkinfer, qwythos-9b only, sample pace measured"}
    heads = [r["head"] for r in found["sparkinfer, sample pace measured"]]
    assert heads == ["qwythos-9b decode +10%", "qwen3.6-35b-a3b decode +10%", "A/A"]
    assert [r["true"] for r in found["sparkinfer, sample pace measured"]] == ["L", "L", "-"]
    assert all(0 <= float(r["tier"]) <= 100 for rows in found.values() for r in rows)
