"""GPU run 53O (docs/gpu-e2e.md, "Run 53O"): issue 53's threshold offset at the shipped Qwen3.6
run's real shape, on an H100, the run of 53Q (the 40-layer file, the run alone, no witnesses, 2
pairs) with a head whose sweep sleeps 2.04% of its own prefill@16384 time after that fill (the
cell really 2% slower, its printed rate main's) and prints every other rate x0.99, so that the
printed time over-accounts for what the sleep leaves unaccounted for (bench/_hiding_heads.py's
row, scripts/gpu_runner/heads_sparkinfer.py `offset-16k`). 53Q's A/A on the same run ruled
prefill@16384 in at 2 pairs; here it is not believed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from evalbot.engine.contract.results import validate
from evalbot.engine.contract.shared import wall_clock
from evalbot.engine.contract.shared.witness_interval import claimed_saving
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.grading.unexplained_cost import NOT_RULED_OUT, cell_floors, cost_critical, cost_floor

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "data" / "sparkinfer" / "o53-h100"
POLICY = load_labels(ROOT / "labels.yaml").policy("default")
QWEN36 = "qwen3.6-35b-a3b"
HIDDEN = f"{QWEN36}/prefill@16384"
HIDDEN_SHARE = 0.0204  # the head's sleep, of its own prefill@16384 seconds: 1 / 0.98 - 1


def _results() -> dict[str, Any]:
    return validate(json.loads((RUN / "qwen36-offset.results.json").read_text()))


def _wall_clock(results: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's samples witness and its cells' records by key."""
    [samples] = [w for w in results["witnesses"] if w["source"] == "samples"]
    return samples, {f"{c['model']}/{c['metric']}@{c['ctx']}": c for c in results["cells"]}


def _main_s(record: dict[str, Any], tokens: int) -> float:
    """Main's seconds for the cell's work, as the wall clock's margin reads them."""
    claimed = claimed_saving(record["samples"], tokens)
    assert claimed is not None
    return claimed[1]


def test_the_offset_is_caught_and_regrades_to_what_it_published() -> None:
    results = _results()
    assert results["models"][0]["path"].endswith("qwen36-synth.gguf")  # the 40 layers
    published = json.loads((RUN / "qwen36-offset.verdict.json").read_text())
    verdict = grade(results, POLICY)
    assert verdict["headline"] == published["headline"] == "eval:inconclusive"
    assert [(c["key"], c["decision"], c["confirmation"]) for c in verdict["cells"]] == \
        [(c["key"], c["decision"], c["confirmation"]) for c in published["cells"]]
    by = {c["key"]: (c["decision"], c["confirmation"]) for c in verdict["cells"]}
    assert by[HIDDEN] == ("unconfirmed", NOT_RULED_OUT)
    assert by[f"{QWEN36}/prefill@32768"][0] == "slower"  # printed 1% slower, truly main's


def test_the_printed_slowdowns_covered_the_hidden_time_and_no_longer_do() -> None:
    """By the printed accounting the head's processes took less time than their rates say
    (the printed 1% over-accounts); with those cells counted as main printed them, the
    unaccounted time is the sleep's, within its noise, and past prefill@16384's margin."""
    results = _results()
    samples, records = _wall_clock(results)
    floor = cost_floor(samples)
    printed = wall_clock.pair_costs(samples, records)
    uncovered, widened = wall_clock.uncovered(samples, records, floor, cell_floors(results))
    tokens = int(samples["cells"][HIDDEN])
    hidden_s = HIDDEN_SHARE * _main_s(records[HIDDEN], tokens)
    margin = results["rule"]["witness_margin"]
    assert printed.mean() < 0 < margin * _main_s(records[HIDDEN], tokens)
    # with cover, the bound at 2 pairs would have ruled the hidden 2% in
    covered = wall_clock.cost_interval(printed, cost_critical(2, floor), floor)
    assert wall_clock.rules_in(covered.hi, records[HIDDEN], tokens, margin)
    assert abs(uncovered.mean() - hidden_s) < 2 * widened.sd_s
    assert not wall_clock.rules_in(uncovered.mean(), records[HIDDEN], tokens, margin)


def test_more_pairs_would_not_have_ruled_it_in_so_the_harness_stops() -> None:
    """The mean unaccounted time is already past the cell's margin: wall_clock.measure_on says
    stop (the run's looks were forced to 2 pairs on the GPU; under the shipped [2, 5, 8] the
    harness would have stopped here too)."""
    results = _results()
    samples, records = _wall_clock(results)
    floor = cost_floor(samples)
    judge = [HIDDEN]
    assert not wall_clock.measure_on(samples, records, judge, cost_critical(2, floor), floor,
                                     results["rule"]["witness_margin"], cell_floors(results))


def test_the_head_printed_what_it_was_built_to_print() -> None:
    """prefill@16384 at main's printed rate (its sleep is outside the timed fill), every other
    cell about 1% slower, and each head process about the sleep longer than main's."""
    results = _results()
    for c in results["cells"]:
        side = {s: [x["value"] for x in c["samples"] if x["side"] == s] for s in ("base", "head")}
        ratio = np.mean(side["head"]) / np.mean(side["base"])
        want = 1.0 if f"{c['model']}/{c['metric']}@{c['ctx']}" == HIDDEN else 0.99
        assert abs(ratio - want) < 0.006, (c["metric"], c["ctx"], ratio)
    samples, _ = _wall_clock(results)
    wall = {s: np.mean([x["seconds"] for x in samples["samples"] if x["side"] == s])
            for s in ("base", "head")}
    assert 0.2 < wall["head"] - wall["base"] < 1.5
