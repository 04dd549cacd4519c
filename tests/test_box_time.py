"""`evalbot box-time` on the GPU acceptance's results (an older harness: figures derived from
what it recorded) and on bad input; a fresh demo results file is checked in tests/test_demo_e2e.py.
The box-time line of the comment and the dashboard (evalbot/report/box_time_view.py) too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalbot.cli import cli
from evalbot.engine.contract.results import TIMING_STAGES
from evalbot.grading.box_time import STAGES
from evalbot.report.box_time_view import WORDS, duration, summary

DATA = Path(__file__).parent / "data" / "sparkinfer"
H100 = DATA / "accept-h100" / "broken-prefill.results.json"  # correctness.seconds recorded
H200 = DATA / "accept-h200" / "aa.results.json"  # scored before correctness.seconds existed


def box_time_json(*files: Path) -> list[dict[str, Any]]:
    done = CliRunner().invoke(cli, ["box-time", "--json", *map(str, files)])
    assert done.exit_code == 0, done.output
    return list(json.loads(done.stdout))


def test_an_older_harness_results_get_the_stages_its_records_tell() -> None:
    results = json.loads(H100.read_text())
    (row,) = box_time_json(H100)
    stages = row["stages"]
    assert stages["builds"] == pytest.approx(results["base"]["duration_s"]
                                             + results["head"]["duration_s"])
    for side in ("reference", "base", "head"):
        assert stages[f"correctness_{side}"] == results["correctness"]["seconds"][side]
    measured = {s["seq"]: s["wall_s"] for c in results["cells"] for s in c["samples"]}
    assert stages["measuring"] == pytest.approx(sum(measured.values()))
    assert stages["warmups"] is None  # never recorded: it is in the rest
    assert sum(stages[s] or 0 for s in STAGES) == pytest.approx(results["timing"]["total_s"])
    assert set(row["derived"]) == set(STAGES) - {"warmups"}
    assert row["largest"] == {"stage": "correctness_reference", "seconds": 319.932}


def test_a_rest_that_holds_unknown_stages_is_never_the_largest() -> None:
    (row,) = box_time_json(H200)
    assert [s for s in STAGES if row["stages"][s] is None] == [
        "warmups", "correctness_reference", "correctness_base", "correctness_head"]
    assert row["stages"]["rest"] > row["stages"]["measuring"]  # it holds the scoring
    assert row["largest"]["stage"] == "measuring"


def test_the_table_has_a_row_per_file_with_its_largest_stage_and_marks() -> None:
    done = CliRunner().invoke(cli, ["box-time", str(H100), str(H200)])
    assert done.exit_code == 0, done.output
    rows = {name: next(ln for ln in done.stdout.splitlines() if name in ln)
            for name in (str(H100), str(H200))}
    assert "correctness (reference) 5 min 20 s" in rows[str(H100)]
    assert "319.9*" in rows[str(H100)] and "—" in rows[str(H100)]  # warm-ups unknown
    assert rows[str(H200)].count("—") == 4 and "measuring 1 min 41 s" in rows[str(H200)]
    assert "derived from an older harness" in done.stdout


def test_bad_files_are_named_with_their_problem_and_the_good_ones_still_printed(
        tmp_path: Path) -> None:
    (tmp_path / "cut.json").write_text('{"schema": "evalbot.results/1", ')
    verdict = DATA / "accept-h200" / "aa.verdict.json"
    missing = tmp_path / "missing.json"
    done = subprocess.run([sys.executable, "-m", "evalbot", "box-time", "--json", str(missing),
                           str(H100), str(tmp_path / "cut.json"), str(verdict)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"error: {missing}: cannot read it (No such file or directory)",
        f"error: {tmp_path / 'cut.json'}: not JSON (Expecting property name enclosed in double "
        "quotes: line 1 column 33 (char 32))",
        f"error: {verdict}: not a results file (schema 'evalbot.verdict/1': no upgrade path to "
        "'evalbot.results/1')"]
    assert [row["file"] for row in json.loads(done.stdout)] == [str(H100)]


def test_a_malformed_stage_is_refused_as_not_a_results_file(tmp_path: Path) -> None:
    doc = json.loads(H100.read_text())
    doc["timing"]["stages"] = {**dict.fromkeys(TIMING_STAGES, 1.0), "rest": -3.0}
    (tmp_path / "r.json").write_text(json.dumps(doc))
    done = CliRunner().invoke(cli, ["box-time", str(tmp_path / "r.json")])
    assert done.exit_code == 1
    assert "timing.stages.rest: seconds are finite and >= 0, got -3.0" in done.stderr


def test_the_comment_line_names_the_total_and_the_largest_recorded_stage() -> None:
    stages = {**dict.fromkeys(TIMING_STAGES, 10.0), "correctness_reference": 320.0}
    verdict = {"provenance": {"timing": {"total_s": 550.0, "stages": stages}}}
    assert summary(verdict) == "9 min 10 s, largest: correctness (reference) 5 min 20 s"
    # an older harness's results record the total alone: the line says no more
    assert summary({"provenance": {}}, json.loads(H100.read_text())) == "11 min 33 s"
    assert summary({"provenance": {}}, {"timing": {}}) == ""


def test_every_stage_has_its_words_and_durations_read_as_people_say_them() -> None:
    assert list(WORDS) == list(STAGES)
    assert [duration(s) for s in (0.04, 9.96, 42.4, 599.6, 7500)] == [
        "0.0 s", "10 s", "42 s", "10 min 0 s", "2 h 05 min"]
