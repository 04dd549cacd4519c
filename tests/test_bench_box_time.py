"""Box time per stage as the benches print it (bench/box_time.py's table per verdict kind, and the
per-stage table after each of verdict_quality's and spoof_quality's): every stage non-negative,
the stages adding up to the printed total, and a warmed reference lowering an evaluation's total
by exactly the reference's cost as bench/_box_stages.py models it. Tiny counts: the figures'
values are the benches' business, their bookkeeping is checked here."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from dataclasses import replace

import pytest

from bench import _rows, _score_cost, box_time, verdict_quality
from evalbot.grading.box_time import STAGES

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
    spec = _score_cost.correctness(profile)
    assert spec is not None
    plan = _score_cost.rounds(spec)
    assert [len(r) for r in plan] == [b - a for a, b in zip([0, *spec.looks[:-1]], spec.looks,
                                                            strict=True)]
    assert [w.kind for w in plan[0]].count("long") == spec.long_windows
    assert len(_score_cost.rounds(replace(spec, looks=spec.looks[:1]))) == 1
