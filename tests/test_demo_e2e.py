"""`evalbot demo` end to end through the console script, then `evalbot grade` on its results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXPECTED = {"faster": "improved", "neutral": "neutral", "slow_long": "regressed",
            "broken": "incorrect"}


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("demo")
    done = subprocess.run([sys.executable, "-m", "evalbot", "demo", "--out", str(out), "--json"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads(done.stdout)


def test_each_demo_pr_gets_its_verdict(demo_out) -> None:
    _, verdicts = demo_out
    assert {name: v["kind"] for name, v in verdicts.items()} == EXPECTED
    assert verdicts["faster"]["headline"] in {"eval:XL", "eval:L", "eval:M", "eval:S", "eval:XS"}
    assert verdicts["slow_long"]["headline"] == "eval:REJECT"
    assert any(label.startswith("regression-") for label in verdicts["slow_long"]["labels"])
    assert verdicts["broken"]["correctness"]["decision"] == "reject"
    assert verdicts["neutral"]["headline"] == "eval:none"


def test_outputs_are_written_per_pr(demo_out) -> None:
    out, verdicts = demo_out
    for name, verdict in verdicts.items():
        comment = (out / name / "comment.md").read_text()
        assert comment.startswith("<!-- evalbot:v1 ")
        assert verdict["headline"] in comment
        assert json.loads((out / name / "verdict.json").read_text()) == verdict
        assert (out / name / "labels.txt").read_text().split() == verdict["labels"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_grade_recomputes_the_same_verdict(demo_out, name: str) -> None:
    out, verdicts = demo_out
    done = subprocess.run([sys.executable, "-m", "evalbot", "grade",
                           str(out / name / "results.json")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == verdicts[name]


def test_history_holds_every_verdict(demo_out) -> None:
    from evalbot.store.jobs import Store

    out, verdicts = demo_out
    history = Store(out / "evalbot.sqlite3").history(repo="demo/engine")
    assert sorted(h["verdict"]["kind"] for h in history) == sorted(EXPECTED.values())
