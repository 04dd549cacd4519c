"""GPU run 53S (docs/gpu-e2e.md, "Run 53S"): the parts of the shipped sparkinfer profile v9 no GPU
had run, each alone on an H100. `aa-131k-floor`: the 131072 run on an A/A, 8 pairs forced, whose
samples' unaccounted time is now that run's `cost_floor` (its prefill@131072 is held by that
clock alone). `qwen36-aa-alone`: Qwen3.6's run and its five witnesses on the 4-layer synthetic
file, an A/A that came out `eval:inconclusive`, every witnessed cell "slowdown not ruled out": its
witness pairs scattered 0.035-0.065 s, against a margin of 3 ms (1.5% of the 4-layer file's
0.2 s of work), which `evalbot calibrate` on that box names before the first PR."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.results import validate
from evalbot.engine.contract.shared.wall_clock import pair_costs
from evalbot.evaluation.profile import load_profile
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.report.render import render_comment
from evalbot.service.calibrate import witness_noise
from evalbot.service.calibrate_report import unruled
from tests.test_calibrate_witness_margin import stored_floors

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "data" / "sparkinfer" / "s53-h100"
POLICY = load_labels(ROOT / "labels.yaml").policy("default")
PROFILE = load_profile("sparkinfer")
SHA = "22ef00673a5c30f4bd35005ddb5113c001e5fc87"


def _results(name: str) -> dict[str, Any]:
    results = json.loads((RUN / f"{name}.results.json").read_text())
    validate(results)
    return results


# The cells whose regrade differs from what the run published, and why: under the no-cover
# rule (engine/contract/shared/wall_clock.py) the A/A's prefill@32768, printed 0.8-1.0% slower in both of
# its 2 pairs, no longer covers the wall time of its run's other cells, and 2 pairs' bound no
# longer rules either unwitnessed prefill in; the harness now measures such a run on to 5 pairs.
REGRADED = {"qwen36-aa-alone": {
    "qwen3.6-35b-a3b/prefill@16384": ("unconfirmed", "slowdown not ruled out"),
    "qwen3.6-35b-a3b/prefill@32768": ("unconfirmed", "slowdown not ruled out")}}


@pytest.mark.parametrize("name", ["aa-131k-floor", "qwen36-aa-alone"])
def test_each_evaluation_ran_profile_v9_and_regrades_to_what_the_run_published(name: str) -> None:
    results = _results(name)
    assert results["profile_version"] == 9
    published = json.loads((RUN / f"{name}.verdict.json").read_text())
    verdict = grade(results, POLICY)
    assert verdict["headline"] == published["headline"]
    changed = REGRADED.get(name, {})
    assert [(c["key"], c["decision"], c["confirmation"]) for c in verdict["cells"]] == \
        [(c["key"], *changed.get(c["key"], (c["decision"], c["confirmation"])))
         for c in published["cells"]]


def test_the_131072_run_s_cost_floor_is_this_a_a_s_measurement() -> None:
    """8 kept pairs, each sample's wall time against its printed prefill: the pairs' sd of the
    time the rates leave unaccounted for is the floor the shipped profile carries, with its
    degrees of freedom; the A/A itself is unchanged, its wall clock showing nothing."""
    results = _results("aa-131k-floor")
    records = {f"{c['model']}/{c['metric']}@{c['ctx']}": c for c in results["cells"]}
    [samples] = [w for w in results["witnesses"] if w["source"] == "samples"]
    u = pair_costs(samples, records)
    [long_run] = [r for r in PROFILE.runs if any(c.ctx == 131072 for c in r.cells)]
    assert (round(float(np.std(u, ddof=1)), 3), len(u) - 1) == \
        (long_run.cost_floor_s, long_run.cost_floor_df)
    verdict = grade(results, POLICY)
    assert verdict["headline"] == "eval:none"
    assert [c["decision"] for c in verdict["cells"]] == ["neutral"]
    # 2% of its prefill (28.2 s at 4,655 tok/s) is 0.57 s: five times this floor
    prefill_s = 131072 / records["qwythos-9b/prefill@131072"]["samples"][0]["value"]
    assert 0.02 * prefill_s > 4.5 * long_run.cost_floor_s


def test_the_qwen36_a_a_is_a_false_flag_the_box_s_witness_noise_explains() -> None:
    """Not a REJECT and not a tier: every witnessed cell is not believed because its witness
    could not rule the 1.5% margin out, and the unwitnessed prefills are not believed either: their
    run's wall clock, on 2 pairs, cannot rule it out once prefill@32768's printed slowdown buys no
    cover (published: unchanged ʷ). Each decode witness's pair sd was several times the profile's floor,
    where the witnesses' mean differences stayed within their noise (the two builds agree)."""
    results = _results("qwen36-aa-alone")
    verdict = grade(results, POLICY)
    assert verdict["headline"] == "eval:inconclusive"
    by = {c["key"].split("/")[1]: (c["decision"], c["confirmation"]) for c in verdict["cells"]}
    assert {k for k, v in by.items() if v == ("unconfirmed", "slowdown not ruled out")} == \
        {"decode@128", "decode@512", "decode@4096", "prefill@512", "prefill@4096",
         "prefill@16384", "prefill@32768"}
    noise = witness_noise(results)
    floors = {w.name: w.sd_floor_s for r in PROFILE.runs for w in r.witnesses}
    for name in ("qwen36-decode-128", "qwen36-decode-512", "qwen36-decode-4096"):
        sd, pairs = noise[f"witness:{name}"]
        assert pairs == 16 and sd > 3 * floors[name], (name, sd)


def test_calibrate_on_that_box_names_every_qwen36_witness_before_the_first_pr(
        tmp_path: Path) -> None:
    floors, df = stored_floors(tmp_path, witness_noise(_results("qwen36-aa-alone")),
                               profile="sparkinfer")
    box = BoxConfig(name="h100-2", kind="local", workdir=str(tmp_path), repo=str(tmp_path))
    found = unruled(floors, df, _results("qwen36-aa-alone"), PROFILE, POLICY, box, SHA)
    assert {u.witness for u in found.unruled} == {
        "qwen36-prefill-512", "qwen36-prefill-4096-decode-512", "qwen36-decode-128",
        "qwen36-decode-512", "qwen36-decode-4096"}
    assert found.any_miss > 0.99
    assert "eval:inconclusive" in found.lines()[-1]


def test_the_131072_prefill_is_marked_as_the_wall_clock_s() -> None:
    """Its row, the legend and the headline say which clock ruled the cell in: its run's wall
    clock, not a witness of its own."""
    results = _results("aa-131k-floor")
    comment = render_comment(grade(results, POLICY), results=results)
    assert "No speed change: every cell is within ±2% of main (1 of them on the run's wall " \
        "clock only)" in comment
    assert "|  unchanged ʷ | prefill @ 128k |" in comment
    assert "ʷ: no witness of the harness times this cell: its run's wall clock (the time its " \
        "processes took beyond what their printed rates account for) ruled out a slowdown of " \
        "1.5% of its work" in comment
