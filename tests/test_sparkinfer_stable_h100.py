"""GPU run 51's A/A on the stable Qwythos file (docs/gpu-e2e.md, "Correctness on the stable file"):
one H100, the shipped correctness section, the reference scored cold. Main agreed with the pinned
reference on 81.7% of short and 51.9% of deep positions, under the policy's 0.90, so the section
ended as main's drift (`eval:infra-error`, not the PR's fault). The fixture regrades to what the run
published, its stages add up, and the floors the runner calibrates from it for the run's later
evaluations are the ones `evalbot calibrate` would store."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from evalbot.engine.contract.results import validate
from evalbot.grading.box_time import STAGES
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "data" / "sparkinfer" / "stable-h100"
POLICY = load_labels(ROOT / "labels.yaml").policy("default")
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_runner import profiles, summary  # noqa: E402


def _results() -> dict:
    return json.loads((RUN / "aa.results.json").read_text())


def test_the_a_a_regrades_to_main_s_drift_as_published() -> None:
    results, published = _results(), json.loads((RUN / "aa.verdict.json").read_text())
    validate(results)
    verdict = grade(results, POLICY)
    assert (verdict["headline"], verdict["kind"]) == (published["headline"], published["kind"])
    assert verdict["headline"] == "eval:infra-error" and verdict["correctness"]["drift"]
    assert all(c["decision"] == "neutral" for c in verdict["cells"])  # the speed half stands


def test_main_s_agreement_on_the_stable_file_is_what_the_closing_note_states() -> None:
    corr = _results()["correctness"]
    got = summary.agreement(corr)
    assert (got["short"]["main"], got["deep"]["main"]) == (0.8168, 0.5195)
    assert got["short"]["main"] == got["short"]["pr"]  # the docs-only head: bit-identical
    assert corr["stopped"] == "identical"


def test_the_stages_add_up_and_the_reference_was_scored_cold() -> None:
    results = _results()
    timing, corr = results["timing"], results["correctness"]
    assert set(timing["stages"]) == set(STAGES)
    assert abs(sum(timing["stages"].values()) - timing["total_s"]) <= 1.0
    assert corr["reference"]["cached"] == 0 and corr["reference"]["scored"] == len(corr["windows"])


def test_the_floors_calibrated_from_the_a_a_sit_below_main_and_above_a_random_file() -> None:
    floors = profiles.calibrated_floors(RUN / "aa.results.json")
    profile_floors = yaml.safe_load((RUN / "aa.yaml").read_text())["correctness"].get("floors")
    assert profile_floors is None  # the A/A ran on the policy's floors (0.90), as shipped
    assert 0.06 < floors["top1"] < 0.777  # under main's pooled agreement, far over the random file's


def test_a_later_evaluation_s_profile_takes_the_a_a_s_floors_and_the_cut_sweep() -> None:
    shipped = yaml.safe_load((ROOT / "evalbot" / "profiles" / "sparkinfer.yaml").read_text())
    digests = profiles.digests_of(RUN / "models.sha256")
    doc = profiles.sparkinfer(shipped, digests, "src-key",
                              ["--correctness", "--stable", "--speed-cut"], RUN / "aa.results.json")
    assert doc["correctness"]["floors"] == profiles.calibrated_floors(RUN / "aa.results.json")
    [run] = doc["speed"]["runs"]
    assert run["cells"] and all(c["ctx"] <= 4096 for c in run["cells"])
    assert all(int(k.split("@")[1]) <= 4096 for w in run["witnesses"] for k in w["cells"])
