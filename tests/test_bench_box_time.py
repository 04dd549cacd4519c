"""Box time per stage as the benches print it (bench/box_time.py's table per verdict kind, and the
per-stage table after each of verdict_quality's and spoof_quality's): every stage non-negative,
the stages adding up to the printed total, and a warmed reference lowering an evaluation's total
by exactly the reference's cost as bench/_box_stages.py models it; `--profile` models the profile
it is given, `--measured` sets a GPU run's recorded stages beside the model; the fixtures' figures
never take a build the cache served, nor a reference read from its cache, for work done. Tiny
counts: the figures' values are the benches' business, their bookkeeping is checked here."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from dataclasses import replace
from pathlib import Path

import pytest

from bench import _gpu_fixtures, _rows, _score_cost, box_time, verdict_quality
from bench._simbox import shipped
from evalbot.evaluation.profile import load_profile
from evalbot.grading.box_time import STAGES

RUN = Path(__file__).resolve().parent / "data" / "sparkinfer" / "verdict-cost-h100"
PROFILE = RUN / "profile.yaml"  # the shipped sparkinfer profile as the GPU run had it: Qwythos alone

# per-stage columns (bench/_rows.py STAGE_HEADER): the stages, total, min, reference cold, total cold
COLUMNS = len(STAGES) + 4


def printed(main, argv: list[str]) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        main(argv)
    return buf.getvalue()


def stage_rows(out: str) -> list[list[float]]:
    """The numbers of every per-stage row: its last COLUMNS cells."""
    rows = []
    for ln in out.splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if ln.startswith("| ") and len(cells) > COLUMNS and cells[-1].replace(".", "").isdigit():
            rows.append([float(c) for c in cells[-COLUMNS:]])
    return rows


def check_sums(rows: list[list[float]]) -> None:
    """Cells are rounded to whole seconds (minutes to a tenth): sums agree to that rounding."""
    assert rows
    for r in rows:
        stages, (total, minutes, reference, cold) = r[:len(STAGES)], r[len(STAGES):]
        assert min(r) >= 0, r
        assert abs(sum(stages) - total) <= 0.5 * (len(STAGES) + 1), r
        assert abs(cold - total - reference) <= 1.5, r
        assert abs(minutes - total / 60) <= 0.06, r


def test_the_verdict_kind_table_adds_up() -> None:
    out = printed(box_time.main, ["--sims", "1", "--jobs", "1"])
    rows = stage_rows(out)
    assert len(rows) == len(box_time.variants()) * len(box_time.KINDS)
    check_sums(rows)


def test_the_simulation_benches_print_stages_that_add_up() -> None:
    out = printed(verdict_quality.main, ["--sims", "1", "--liar-sims", "1", "--jobs", "1",
                                         "--profiles", "llamacpp", "--heads", "A/A"])
    check_sums(stage_rows(out))


def test_a_warmed_reference_lowers_the_total_by_its_modelled_cost() -> None:
    rows = box_time.rows(sims=1, seed=2, jobs=1)
    assert any(r.box.reference_s(r.rounds) > 0 for r in rows)  # else warming could change nothing
    for r in rows:
        warm = _rows.stages(r.box, r.tally, r.rounds)
        cold = _rows.stages(r.box, r.tally, r.rounds, warm=False)
        reference = r.tally.scored / r.tally.n * r.box.reference_s(r.rounds)
        assert cold.total - warm.total == pytest.approx(reference)
        assert {k: v for k, v in cold.seconds.items() if k != "correctness_reference"} == \
            {k: v for k, v in warm.seconds.items() if k != "correctness_reference"}


@pytest.mark.parametrize("profile", ["sparkinfer", "llamacpp"])
def test_correctness_rounds_follow_the_shipped_section(profile: str) -> None:
    """Round j scores up to looks[j] windows, long ones all in round one; fewer looks, fewer
    rounds: nothing of the section's counts is the bench's own."""
    spec = _score_cost.correctness(shipped(profile))
    assert spec is not None
    plan = _score_cost.rounds(spec)
    assert [len(r) for r in plan] == [b - a for a, b in zip([0, *spec.looks[:-1]], spec.looks,
                                                            strict=True)]
    assert [w.kind for w in plan[0]].count("long") == spec.long_windows
    assert len(_score_cost.rounds(replace(spec, looks=spec.looks[:1]))) == 1


def test_the_profile_option_models_the_given_profile() -> None:
    """The one-model profile of the GPU run: its rows alone (no Qwen3.6, no llamacpp), one run
    of warm-ups (the shipped profile's Qwythos has two), its own correctness section."""
    out = printed(box_time.main, ["--sims", "1", "--jobs", "1", "--profile", str(PROFILE)])
    rows = stage_rows(out)
    assert len(rows) == len(box_time.KINDS)
    check_sums(rows)
    labels = [ln.split("|")[1].strip() for ln in out.splitlines()
              if any(f"| {kind.name} |" in ln for kind in box_time.KINDS)]
    assert len(labels) == len(box_time.KINDS)
    assert set(labels) == {"sparkinfer-witness-e2e: qwythos-9b"}
    assert "qwen3.6" not in out and "llamacpp" not in out
    profile = load_profile(str(PROFILE))
    assert len(profile.runs) == 1
    (variant,) = box_time.variants(profile)
    box = _rows.box_model(variant, None)
    assert len(box.warmups) == 1 and len(_rows.box_model(box_time.variants()[0], None).warmups) == 2
    assert len(box.side_rounds) == len(_score_cost.correctness(profile).looks)


def test_measured_results_sit_beside_the_model_stage_by_stage() -> None:
    """Each results file's recorded stages, printed as recorded; the model's builds for the
    sides the run built (the A/A's main came from the cache: one side)."""
    files = [RUN / "aa.results.json", RUN / "prefill-4k.results.json"]
    out = printed(box_time.main, ["--sims", "1", "--jobs", "1", "--profile", str(PROFILE),
                                  "--measured", *map(str, files)])
    for f in files:
        recorded = json.loads(f.read_text())["timing"]["stages"]
        block = out.split(f"{f.name} against the model", 1)[1].split("\n\n", 2)[1]
        cells = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:5]]
                 for ln in block.splitlines() if ln.startswith("| ") and "stage" not in ln}
        assert set(cells) == {*STAGES, "total"}
        for stage, seconds in recorded.items():
            assert float(cells[stage][2]) == pytest.approx(seconds, abs=0.05)
        built = sum(not json.loads(f.read_text())[s]["cached"] for s in ("base", "head"))
        assert float(cells["builds"][1]) == pytest.approx(
            built * _gpu_fixtures.build_s("sparkinfer"), abs=0.05)


def test_a_build_the_cache_served_never_lowers_the_estimate() -> None:
    fresh = {"cached": False, "duration_s": 30.0}
    served = {"cached": True, "duration_s": 0.0}
    both = {"base": fresh, "head": fresh, "timing": {"total_s": 61.0, "stages": {
        **dict.fromkeys(STAGES, 0.0), "builds": 61.0}}}
    one = {"base": served, "head": fresh}  # an older harness: durations only
    none = {"base": served, "head": served}
    assert _gpu_fixtures.per_side_build_s([both]) == pytest.approx(30.5)  # the recorded stage
    assert _gpu_fixtures.per_side_build_s([both, one, none]) == pytest.approx(91.0 / 3)


def test_a_reference_read_from_its_cache_is_left_out_of_the_fit() -> None:
    docs = [d for d in _gpu_fixtures.results("sparkinfer")
            if (d.get("correctness") or {}).get("seconds")]
    cached = [d for d in docs if (d["correctness"].get("reference") or {}).get("cached")]
    assert cached and len(cached) < len(docs)  # verdict-cost-h100's, beside accept-h100's
    sides, refs = _score_cost._timed(docs)
    assert len(refs) == len(docs) - len(cached)
    # a main that read windows from its own cache (score-threads-h100's A/A) is left out too
    mains_cached = [d for d in docs if (d["correctness"].get("main_scores") or {}).get("cached")]
    assert mains_cached and len(sides) == 2 * len(docs) - len(mains_cached)


def test_the_harness_rest_is_the_recorded_one() -> None:
    """Results with `timing.stages` give the rest; the older harnesses' derived rest held the
    gaps the stopwatch now charges to the stages."""
    rests = [json.loads(f.read_text())["timing"]["stages"]["rest"]
             for run in (RUN, RUN.parent / "score-threads-h100")
             for f in sorted(run.glob("*.results.json"))]
    assert _gpu_fixtures.rest_s() == pytest.approx(sum(rests) / len(rests))
    assert _gpu_fixtures.derived_rest_s() > _gpu_fixtures.rest_s()


def test_a_named_head_is_an_honest_head_of_those_cells() -> None:
    head = box_time.named_head("qwythos-9b/decode@128=0.09,qwythos-9b/prefill@65536=0.307")
    assert head.real == {"qwythos-9b/decode@128": pytest.approx(1.09),
                         "qwythos-9b/prefill@65536": pytest.approx(1.307)}
    assert head.honest and not head.printed and head.true_tier is not None
    for bad in ("qwythos-9b/decode@128", "qwythos-9b/decode@128=fast"):
        with pytest.raises(SystemExit, match="KEY=GAIN"):
            box_time.named_head(bad)


def test_a_named_head_gets_a_row_in_the_variant_that_runs_its_model() -> None:
    chosen = box_time.variants()
    [row] = box_time.head_rows(["qwythos-9b/decode@128=0.09"], chosen, 2, 1, 1)
    assert row.startswith("| qwythos-9b | honest: qwythos-9b/decode@128 +9% |")
    with pytest.raises(SystemExit, match="no variant runs"):
        box_time.head_rows(["nosuch/decode@128=0.09"], chosen, 2, 1, 1)
