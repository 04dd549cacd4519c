"""GPU run 53 on one H100 (docs/gpu-e2e.md, "A slowdown hidden by printing"): sparkinfer's shipped
profile less its correctness section, its sweep cut to the cells up to 4096, under design B (every
witness times every covered cell). `aa-speed` is main against a docs-only head; `hide-decode` runs
the LM head twice below depth 4096 and prints decode@128 x1.09, main's rate. The fixtures regrade
to what the run published, the hidden cell is caught by the harness's clock alone, and the A/A's
witness pairs are the device's noise per covered cell that docs/statistics.md section 9 quotes."""

from __future__ import annotations

import copy
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from evalbot.engine.contract.results import validate
from evalbot.engine.contract.shared.witness_interval import pair_savings
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "data" / "sparkinfer" / "hidden-h100"
POLICY = load_labels(ROOT / "labels.yaml").policy("default")
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_runner import summary  # noqa: E402


def _load(name: str, kind: str) -> dict:
    return json.loads((RUN / f"{name}.{kind}.json").read_text())


def _witness(results: dict, name: str) -> dict:
    [w] = [w for w in results["witnesses"] if w["name"] == name]
    return w


@pytest.mark.parametrize("name, published_headline, now", [
    # published eval:none; the one rule (issue 53, after the run) believes an unchanged covered
    # cell only where its witness rules a 2% slowdown out: decode-4096's 8 pairs (sd 0.047 s a
    # pair, 1.5% of its 3.10 s) do not at the old last look, where the harness stopped then
    ("aa-speed", "eval:none", {"decode@128": "neutral", "decode@4096": "unconfirmed",
                               "prefill@4096": "neutral"}),
    ("hide-decode", "eval:inconclusive", {"decode@128": "unconfirmed", "decode@4096": "neutral",
                                          "prefill@4096": "neutral"}),
])
def test_each_evaluation_regrades_as_listed(name: str, published_headline: str,
                                            now: dict[str, str]) -> None:
    results, published = _load(name, "results"), _load(name, "verdict")
    validate(results)
    assert results["rule"]["witness_every_cell"]  # design B, as the run's profile asked
    assert published["headline"] == published_headline
    verdict = grade(results, POLICY)
    assert verdict["headline"] == "eval:inconclusive"
    assert {c["key"].split("/")[1]: c["decision"] for c in verdict["cells"]} == now
    if name == "hide-decode":
        assert summary.judge("caught:decode@128", verdict)


def test_the_hidden_cell_is_not_believed_for_the_time_the_harness_measured() -> None:
    verdict = grade(_load("hide-decode", "results"), POLICY)
    [cell] = [c for c in verdict["cells"] if c["key"].endswith("decode@128")]
    assert cell["decision"] == "unconfirmed" and not cell["believed"]
    assert verdict["headline"] == "eval:inconclusive"
    # the head's decode-128 witness processes took longer than main's in every pair: about 7.5%
    # of main's 1.33 s, where the bench printed main's rate
    d = pair_savings(_witness(_load("hide-decode", "results"), "decode-128")["samples"], need_verified=True)
    assert len(d) >= 8 and (d < 0).all()
    assert 0.05 < -d.mean() / 1.33 < 0.10


@pytest.mark.parametrize("witness, sd_max",
                         [("decode-128", 0.03), ("decode-4096", 0.06), ("prefill-4096", 0.01)])
def test_the_a_a_s_witness_noise_is_what_section_9_quotes(witness: str, sd_max: float) -> None:
    """The A/A's per-pair sd of each witness, and so the pairs an equivalence test at the 2%
    regression threshold needs there (docs/statistics.md section 9)."""
    w = _witness(_load("aa-speed", "results"), witness)
    d = pair_savings(w["samples"], need_verified=True)
    base = float(np.mean([s["seconds"] for s in w["samples"] if s["side"] == "base"]))
    sd = float(np.std(d, ddof=1))
    assert len(d) >= 3 and 0 < sd < sd_max
    assert abs(d.mean()) < 3 * sd / math.sqrt(len(d))  # an A/A: no saving either way
    assert 0.5 < base < 3.5


def test_design_a_alone_lets_the_hidden_cell_pass_as_unchanged() -> None:
    """The same results under design A (the samples' check, no witness for an unchanged cell):
    decode@128's 0.03 s in the sweep's process is under the samples' noise (docs/gpu-e2e.md)."""
    results = copy.deepcopy(_load("hide-decode", "results"))
    results["rule"]["witness_every_cell"] = False
    results["witnesses"] = [w for w in results["witnesses"] if w["source"] == "samples"]
    verdict = grade(results, POLICY)
    assert verdict["headline"] == "eval:none"
    assert all(c["decision"] == "neutral" for c in verdict["cells"])


def test_the_comment_says_not_believed_not_faster_for_unchanged_cells_held_for_time() -> None:
    """The second run's A/A (shipped v6, before the witnesses got the budget's share): two cells
    printed unchanged and not believed. Its comment drew them as "faster, not confirmed"; every
    line now says what they are."""
    from evalbot.report.render import render_comment

    results = json.loads((RUN.parent / "hidden-h100-v6" / "aa-speed.results.json").read_text())
    comment = render_comment(grade(results, POLICY), results=results)
    head, table = comment.split("| result |", 1)
    assert "Not decided: 2 cells not believed (slowdown not ruled out); 1 unchanged" in head
    assert "0 faster" in head and "2 not believed" in head  # the counts line
    assert "not confirmed" not in comment
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert sum("❓ not believed" in r for r in rows) == 2 and not any("faster" in r for r in rows)
