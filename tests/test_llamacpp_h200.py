"""The llamacpp profile's evaluations on the H200 (docs/gpu-e2e.md, "The handoff witness on the
GPU"), regraded from the results files the harness wrote there: grading is pure, so today's
grading of the same measurements must give the published verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels

DATA = Path(__file__).parent / "data" / "llamacpp"
LABELS = Path(__file__).resolve().parents[1] / "labels.yaml"
KEY = "qwen3-0p6b-synth/decode@4096"


def _graded(name: str) -> tuple[dict, dict]:
    results = json.loads((DATA / f"h200-{name}.results.json").read_text())
    return results, grade(results, load_labels(LABELS).policy("default"))


def test_a_real_decode_speedup_keeps_a_tier_the_handoff_witness_measured() -> None:
    """Base: CUDA graphs off; head: main. llama-bench printed +24% at decode@4096; the witness,
    on the handoff clock, saw its own saving and confirmed it. The tier is what the witness
    measured (M), not what the binary printed (XL)."""
    results, verdict = _graded("speedup")
    (witness,) = [w for w in results["witnesses"] if w["source"] == "witness"]
    assert witness["clock"] == "handoff"
    assert all(s["verified"] for s in witness["samples"])
    cells = {c["key"]: c for c in verdict["cells"]}
    assert cells[KEY]["decision"] == "improved"
    assert cells[KEY]["confirmation"] == "confirmed"
    assert cells[KEY]["speedup"] > 0.18  # XL by the printed rates ...
    assert 0.06 <= cells[KEY]["witness_gain"] < 0.10  # ... M by the harness's own clock
    assert verdict["headline"] == "eval:M"
    assert cells["qwen3-0p6b-synth/decode@0"]["decision"] == "unconfirmed"  # no witness


@pytest.mark.parametrize("name, kind", [("aa", "inconclusive"), ("slow", "regressed")])
def test_the_other_gpu_evaluations_grade_as_published(name: str, kind: str) -> None:
    """A/A (a docs-only head): no tier and no REJECT (prefill@0 was too noisy to decide in this
    session); graphs off: REJECT on both decode cells."""
    _, verdict = _graded(name)
    assert verdict["kind"] == kind
    assert verdict["tier"] is None
    decisions = {c["key"]: c["decision"] for c in verdict["cells"]}
    if name == "slow":
        assert decisions[KEY] == decisions["qwen3-0p6b-synth/decode@0"] == "regressed"
        assert verdict["headline"] == "eval:REJECT"
    else:
        assert "regressed" not in decisions.values()
        assert "improved" not in decisions.values()


def test_the_shipped_witness_confirms_at_its_first_look_within_its_share() -> None:
    """The same evaluation with the witness of this revision (flash attention off, the H200
    A/A's floor, looks at 3/5/8, the box-time share): confirmed at 3 pairs on the pooled sd,
    its processes a twentieth of the measuring's box time."""
    results, verdict = _graded("speedup-witness-fa-off")
    (witness,) = [w for w in results["witnesses"] if w["source"] == "witness"]
    assert (witness["stopped"], len(witness["samples"]), witness["sd_floor_s"]) == \
        ("settled", 6, 0.032)
    assert all(s["verified"] for s in witness["samples"])
    assert all(s["seconds"] < 2.3 for s in witness["samples"])  # was 4.4 s with FA on auto
    spent = sum(s["wall_s"] for s in witness["samples"])
    measured = sum(s["seconds"] for w in results["witnesses"] if w["source"] == "samples"
                   for s in w["samples"])
    assert spent <= witness["allowance_s"] and spent < 0.06 * measured
    cells = {c["key"]: c for c in verdict["cells"]}
    assert (cells[KEY]["decision"], cells[KEY]["confirmation"]) == ("improved", "confirmed")
    assert 0.06 <= cells[KEY]["witness_gain"] < 0.10 and cells[KEY]["witness_lo"] > 0.03
    assert [j["sd"] for j in verdict["witnesses"] if j["source"] == "witness"] == ["pooled"]
    assert verdict["headline"] == "eval:M"
