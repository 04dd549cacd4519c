"""GPU run 53's third try (docs/gpu-e2e.md, "A slowdown hidden by printing"), on one H100, of the
code after both fixes of the second try (19f9dcb): the witnesses' room a share of the measuring's
budget, and a covered cell judged on its witness's clock alone. The shipped profile less its
correctness section, its sweep cut to the cells up to 4096. The A/A is `eval:none` with every
covered cell's slowdown ruled out by its own witness; the hiding head (decode@128 really slower,
printed at main's rate) is caught, and the harness spent no box time on the witnesses of cells
that could no longer change the verdict. Each comment line says which of those happened."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from evalbot.engine.contract.results import validate
from evalbot.engine.contract.shared.witness_interval import pair_savings
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.report.render import render_comment

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "data" / "sparkinfer" / "hidden-h100-fixed"
POLICY = load_labels(ROOT / "labels.yaml").policy("default")
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_runner import summary  # noqa: E402


def _results(name: str) -> dict:
    results = json.loads((RUN / f"{name}.results.json").read_text())
    validate(results)
    return results


@pytest.mark.parametrize("name", ["aa-speed", "hide-decode"])
def test_each_evaluation_regrades_to_what_the_run_published(name: str) -> None:
    published = json.loads((RUN / f"{name}.verdict.json").read_text())
    verdict = grade(_results(name), POLICY)
    assert verdict["headline"] == published["headline"]
    assert [(c["key"], c["decision"]) for c in verdict["cells"]] == \
        [(c["key"], c["decision"]) for c in published["cells"]]


def assert_every_slowdown_ruled_out(results: dict) -> str:
    """An A/A of the cut sweep: eval:none, its 3 cells unchanged, each witness ruling 2% out and
    its comment line saying so. Returns the comment."""
    verdict = grade(results, POLICY)
    assert verdict["headline"] == "eval:none"
    assert all(c["decision"] == "neutral" for c in verdict["cells"])
    witnesses = [w for w in verdict["witnesses"] if w["source"] == "witness"]
    assert len(witnesses) == 3 and all(
        c["ruled_out"] for w in witnesses for c in w["cells"].values())
    comment = render_comment(verdict, results=results)
    lines = [line for line in comment.splitlines() if line.startswith("- Witness")]
    assert len(lines) == 3 and all("a 2% slowdown ruled out" in line for line in lines)
    return comment


def test_the_a_a_is_unchanged_on_its_witnesses_clock_alone() -> None:
    results = _results("aa-speed")
    comment = assert_every_slowdown_ruled_out(results)
    # under the first fix, every witness ran to the look that ruled the slowdown out; none was
    # cut at its first look for box time as in the second try
    assert all(w["stopped"] == "settled" for w in results["witnesses"] if w["source"] == "witness")
    assert "unconfirmed" not in comment


def test_the_hiding_head_is_caught_and_the_spared_witnesses_say_why() -> None:
    results = _results("hide-decode")
    verdict = grade(results, POLICY)
    assert summary.judge("caught:decode@128", verdict)
    [w] = [w for w in results["witnesses"] if w["name"] == "decode-128"]
    d = pair_savings(w["samples"], need_verified=True)
    assert len(d) >= 3 and (d < 0).all()  # the head slower in every pair on the harness's clock
    spared = {w["name"] for w in results["witnesses"] if w.get("stopped") == "not_needed"}
    assert spared == {"decode-4096", "prefill-4096"}
    head = render_comment(verdict, results=results).split("| result |", 1)[0]
    assert "❓ decode @ 128: not believed: the harness's clock could not rule out a slowdown of 2%" \
        in head
    # not "could not time this cell": the harness chose not to, and the line says so
    assert "could not time" not in head
    assert "❓ decode @ 4k, prefill @ 4k: not believed: its witness was not run: another cell " \
        "(a regression, or a cell not believed) had already settled the verdict" in head


def test_a_cell_whose_witness_is_missing_is_not_believed_on_the_wall_clock() -> None:
    """Where the rule times every covered cell, a cell no witness timed (its witness removed
    from the results: a head that made it fail, a profile that covers less) is its run's wall
    clock's to rule in: decode@4096's 128 tokens are 0.37 s of a 3.6 s process, whose 1.5% (6
    ms) that clock cannot resolve at 2 pairs, so it is not believed, where the A/A's others
    were ruled in by their witnesses."""
    results = _results("aa-speed")
    results["witnesses"] = [w for w in results["witnesses"] if w["name"] != "decode-4096"]
    verdict = grade(results, POLICY)
    assert verdict["headline"] == "eval:inconclusive"
    cells = {c["key"].split("/")[1]: (c["decision"], c["confirmation"]) for c in verdict["cells"]}
    assert cells["decode@4096"] == ("unconfirmed", "slowdown not ruled out")
    assert {k for k, (d, _) in cells.items() if d == "neutral"} == {"decode@128", "prefill@4096"}
    comment = render_comment(verdict, results=results)
    assert "ʷ" not in comment
