"""`evalbot demo` end to end through the console script, then `evalbot grade` on its results.

Each demo PR is its own `evalbot demo --only NAME` in its own class: pytest-xdist hands classes
out separately (`--dist loadscope`, pyproject.toml), so the four shipped-profile evaluations run
side by side instead of one after the other on one worker. `--only` filters the same loop that
plain `evalbot demo` runs over all four (evalbot/evaluation/demo.py); the broken PR's, through
bench/demo_under_load.py's short form, which runs that command.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXPECTED = {"faster": "improved", "neutral": "neutral", "slow_long": "regressed",
            "broken": "incorrect"}
TIERS = {"eval:XL", "eval:L", "eval:M", "eval:S", "eval:XS"}


ROOT = Path(__file__).resolve().parents[1]
# a class's first test sets up its demo evaluation, whose own deadline (900 s) is longer than
# pyproject.toml's per-test timeout: that deadline, with its message, comes first
pytestmark = pytest.mark.timeout(960)
# bench/demo_under_load.py's short form (its README command, one quiet run of one PR): the broken
# PR's class checks the outputs of that run (--keep), so the bench and the class share one demo
# evaluation (a minute of CPU) instead of running one each
BENCH = [sys.executable, str(ROOT / "bench" / "demo_under_load.py"), "--runs", "1", "--busy", "0"]


@pytest.fixture(scope="class")
def demo_run(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, Any]]:
    """One `evalbot demo --only NAME` per class: with --json (the verdicts on stdout), as a
    user runs it (a short report on stdout, kept in out/stdout.txt for the tests), or through
    bench/demo_under_load.py (--json too, its stdout kept in out/stdout.json)."""
    name, as_json = request.cls.PR, request.cls.JSON
    if request.cls.BENCH:
        return _bench_run(name, tmp_path_factory.mktemp(f"bench-{name}"))
    out = tmp_path_factory.mktemp(f"demo-{name}")
    done = subprocess.run([sys.executable, "-m", "evalbot", "demo", "--only", name,
                           "--out", str(out), *(["--json"] if as_json else [])],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    if not as_json:
        (out / "stdout.txt").write_text(done.stdout)
        return out, name, json.loads((out / name / "verdict.json").read_text())
    verdicts = json.loads(done.stdout)
    assert list(verdicts) == [name]  # --only: this PR and no other
    return out, name, verdicts[name]


def _bench_run(name: str, keep: Path) -> tuple[Path, str, dict[str, Any]]:
    """The bench's short form, which must exit 0 with its table; its one run's output folder."""
    done = subprocess.run([*BENCH, "--only", name, "--keep", str(keep)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert "1 of 1 runs: every verdict as expected" in done.stdout, done.stdout[-2000:]
    out = keep / "run-1"
    verdicts = json.loads((out / "stdout.json").read_text())
    assert list(verdicts) == [name]  # --only: this PR and no other
    return out, name, verdicts[name]


class DemoPR:
    """The checks every demo PR gets; a subclass names the PR."""

    PR = ""
    JSON = False
    BENCH = False  # run through bench/demo_under_load.py (JSON)

    def test_gets_its_verdict(self, demo_run) -> None:
        _, name, verdict = demo_run
        assert verdict["kind"] == EXPECTED[name]
        self.check_headline(verdict)

    def check_headline(self, verdict: dict[str, Any]) -> None:
        raise NotImplementedError

    def test_outputs_are_written(self, demo_run) -> None:
        out, name, verdict = demo_run
        comment = (out / name / "comment.md").read_text()
        assert comment.startswith("<!-- evalbot:v1 ")
        assert verdict["headline"] in comment
        assert json.loads((out / name / "verdict.json").read_text()) == verdict
        assert (out / name / "labels.txt").read_text().split() == verdict["labels"]
        assert (out / "dashboard").is_dir()
        # every page the comment links is written: its run page, the overview, the cells'
        links = re.findall(r"\]\(([^)\s]+)\)", comment)
        local = [u for u in links if "://" not in u]
        assert f"../dashboard/runs/{verdict['provenance']['job_id']}/index.html" in local
        missing = [u for u in local if not (out / name / u).exists()]
        assert missing == [], missing

    def test_reproduce_names_the_repository_it_kept(self, demo_run) -> None:
        """The Reproduce block's --repo is the generated repository, kept under --out, holding
        both commits the verdict names (it was once a temporary folder the demo deleted)."""
        out, name, verdict = demo_run
        comment = (out / name / "comment.md").read_text()
        (repo,) = set(re.findall(r"evalbot eval --repo (\S+) ", comment))
        assert Path(repo) == (out / "demo-engine" / "engine-repo").resolve()
        for sha in (verdict["provenance"]["base_sha"], verdict["provenance"]["head_sha"]):
            subprocess.run(["git", "-C", repo, "cat-file", "-e", f"{sha}^{{commit}}"], check=True,
                           timeout=60)

    def test_grade_recomputes_the_same_verdict(self, demo_run) -> None:
        out, name, verdict = demo_run
        done = subprocess.run([sys.executable, "-m", "evalbot", "grade",
                               str(out / name / "private" / "results.json")],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == verdict

    def test_box_time_per_stage_adds_up_and_is_shown(self, demo_run) -> None:
        """The harness's stages of a real evaluation, through `evalbot box-time` and into the
        comment; the sum is checked, never a duration."""
        from evalbot.report.box_time_view import WORDS, duration

        out, name, verdict = demo_run
        timing = json.loads((out / name / "private" / "results.json").read_text())["timing"]
        assert abs(sum(timing["stages"].values()) - timing["total_s"]) <= 1.0
        # the demo builds, warms up, measures and scores: each of those stages took some time
        ran = {stage for stage, seconds in timing["stages"].items() if seconds > 0}
        assert {"builds", "warmups", "measuring", "correctness_base", "correctness_head"} <= ran
        done = subprocess.run([sys.executable, "-m", "evalbot", "box-time", "--json",
                               str(out / name / "private" / "results.json")],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        (row,) = json.loads(done.stdout)
        assert (row["stages"], row["total_s"], row["derived"]) == \
            (timing["stages"], timing["total_s"], [])
        largest = max(timing["stages"], key=lambda stage: timing["stages"][stage])
        assert row["largest"]["stage"] == largest
        # the comment says the published figures: 3 significant digits (report/publication.py)
        shown = json.loads((out / name / "results.json").read_text())["timing"]
        assert shown["total_s"] == pytest.approx(timing["total_s"], rel=5e-3)
        assert (f"- Box time {duration(shown['total_s'])}, largest: {WORDS[largest]} "
                f"{duration(shown['stages'][largest])}.") in (out / name / "comment.md").read_text()

    def test_history_holds_the_verdict(self, demo_run) -> None:
        from evalbot.store.jobs import Store

        out, name, verdict = demo_run
        history = Store(out / "evalbot.sqlite3").history(repo="demo/engine")
        assert [h["verdict"]["kind"] for h in history] == [EXPECTED[name]]


class PrintedReport:
    """A class that runs the demo as a user does (no --json): what it prints."""

    def test_prints_a_short_report_not_the_comment(self, demo_run) -> None:
        out, name, verdict = demo_run
        printed = (out / "stdout.txt").read_text()
        assert f"{verdict['headline']}, comment in {out / name / 'comment.md'}" in printed
        assert "<!-- evalbot" not in printed and "|---" not in printed
        assert len(printed.splitlines()) < 20


# Slowest first (the faster PR runs its witness; the broken one measures to its budget): the
# classes are handed out in this order.
class TestFasterPR(DemoPR):
    PR = "faster"
    JSON = True

    def check_headline(self, verdict: dict[str, Any]) -> None:
        assert verdict["headline"] in TIERS
        # every cell has a witness of the harness since demo profile v5 (issue 48): a row of the
        # honest PR is believed, or its witness timed a saving that stayed within its noise or
        # was cut by the witnesses' box-time share (the comment says which): never a missing
        # witness nor a contradiction. The PR keeps its tier either way.
        for cell in verdict["cells"]:
            if not cell["believed"]:
                assert cell["confirmation"] == "unconfirmed", cell
                timed = [w for w in verdict["witnesses"] if w["source"] == "witness"
                         and cell["key"] in w["cells"]]
                assert any(w["cells"][cell["key"]]["status"] == "unconfirmed"
                           and (w["stopped"] == "box_time" or w["saving_s"] > 0 > w["lo_s"])
                           for w in timed), (cell["key"], timed)


class TestBrokenPR(DemoPR):
    """Through the bench's short form (TestSlowLongPR checks the printed report)."""

    PR = "broken"
    BENCH = True

    def check_headline(self, verdict: dict[str, Any]) -> None:
        assert verdict["headline"] == "eval:REJECT"
        assert verdict["correctness"]["decision"] == "reject"


class TestNeutralPR(DemoPR):
    PR = "neutral"
    JSON = True

    def check_headline(self, verdict: dict[str, Any]) -> None:
        assert verdict["headline"] == "eval:none"


class TestSlowLongPR(DemoPR, PrintedReport):
    PR = "slow_long"

    def check_headline(self, verdict: dict[str, Any]) -> None:
        assert verdict["headline"] == "eval:REJECT"
        assert any(label.startswith("regression-") for label in verdict["labels"])

    def test_its_regression_settles_the_verdict_and_no_witness_runs(self, demo_run) -> None:
        """decode@1024 regressed, which the policy REJECTs: no witness could change the verdict,
        so none runs (engine/measure/witness_plan.py `regression_decides`), the reasons name the
        regression alone, and the comment says why each witness did not run."""
        out, name, verdict = demo_run
        cells = {c["key"]: c for c in verdict["cells"]}
        assert cells["tiny/decode@1024"]["decision"] == "regressed"
        timed = [w for w in verdict["witnesses"] if w["source"] == "witness"]
        assert {w["name"] for w in timed} == {"decode-64", "decode-1024", "prefill-1024"}
        assert [(w["stopped"], w["pairs"]) for w in timed] == [("not_needed", 0)] * 3
        assert all("regressed by" in r for r in verdict["reasons"]), verdict["reasons"]
        comment = (out / name / "comment.md").read_text()
        for w in timed:
            assert f"Witness `{w['name']}`: not run, the verdict did not need it" in comment
