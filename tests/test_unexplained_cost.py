"""Time a head's printed rates do not account for (evalbot/grading/unexplained_cost.py), as table
tests on results documents: the other direction of the samples' wall-time check (issue 53)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalbot.engine.contract.results import validate
from evalbot.engine.contract.shared.witness_interval import Floor
from evalbot.grading import unexplained_cost
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from tests.test_grading import C, Doc, results

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = load_labels(ROOT / "labels.yaml").policy("default")
LLAMA_AA = ROOT / "tests" / "data" / "llamacpp" / "h200-aa.results.json"
SPARK_AA = ROOT / "tests" / "data" / "sparkinfer" / "accept-h200" / "aa.results.json"


def _hidden(doc: dict[str, Any], cell: str, extra_s: float, printed: float = 1.0) -> dict[str, Any]:
    """The A/A's head made slower by `extra_s` seconds of work per process, hidden behind rates
    printed as main's (x `printed`): the head's wall times grow, its printed rates do not."""
    out = copy.deepcopy(doc)
    for c in out["cells"]:
        if f"{c['model']}/{c['metric']}@{c['ctx']}" == cell:
            for s in c["samples"]:
                if s["side"] == "head":
                    s["value"] *= printed
                    s["wall_s"] = round(s["wall_s"] + extra_s, 4)
    for w in out["witnesses"]:
        if w.get("source") == "samples":
            for s in w["samples"]:
                if s["side"] == "head":
                    s["seconds"] = round(s["seconds"] + extra_s, 4)
    return out


def _load(path: Path) -> dict[str, Any]:
    return validate(json.loads(path.read_text()))


@pytest.mark.parametrize(("u", "floor", "flagged"), [
    ([0.01, -0.02, 0.015, 0.0], Floor(), False),  # an A/A's scatter
    ([0.30, 0.31, 0.29, 0.30], Floor(), True),  # 0.3 s per process, steady: a hidden cost
    ([0.30, 0.31], Floor(), None),  # 2 pairs, no floor: nothing to judge on
    ([0.30, 0.31], Floor(0.05, 20), True),  # ... with a calibrated floor: judged
    ([0.05, 0.06], Floor(0.05, 20), False),  # within the floor's noise
    ([1.0, -0.8, 1.2], Floor(0.05, 20), False),  # pairs that refute the floor: their own sd
    ([-0.4, -0.5, -0.45, -0.42], Floor(), False),  # time saved beyond the rates: not a cost
])
def test_the_cost_is_flagged_only_beyond_the_noise(u, floor, flagged):
    judged = unexplained_cost.judge_cost(np.array(u), floor, unexplained_cost.COST_ALPHA)
    assert (judged and judged["flagged"]) if flagged else not (judged and judged["flagged"])
    assert (judged is None) == (flagged is None)


def test_the_recorded_aa_runs_are_not_flagged():
    for path in (LLAMA_AA, SPARK_AA):
        verdict = grade(_load(path), DEFAULT)
        assert not any(c.get("confirmation") == unexplained_cost.COST for c in verdict["cells"])
        assert not any(unexplained_cost.COST_REASON in r for r in verdict["reasons"])
        # sparkinfer's 2 pairs were recorded before the runs' cost floors: nothing to judge on
        costs = [w["cost"]["flagged"] for w in verdict["witnesses"] if "cost" in w]
        assert costs == ([False] if path == LLAMA_AA else [])


def test_a_slowdown_hidden_behind_main_like_rates_is_not_unchanged():
    """llamacpp's recorded A/A with its head's decode@4096 really taking 1.5 s more per process
    (768 tokens at about half main's rate) while printing main's rates."""
    doc = _hidden(_load(LLAMA_AA), "qwen3-0p6b-synth/decode@4096", 1.5)
    verdict = grade(validate(doc), DEFAULT)
    cells = {c["key"]: c for c in verdict["cells"]}
    slowed = cells["qwen3-0p6b-synth/decode@4096"]
    assert slowed["decision"] == "unconfirmed" and slowed["confirmation"] == unexplained_cost.COST
    assert slowed["tier"] is None
    assert verdict["headline"] == "eval:inconclusive", verdict["reasons"]
    assert any(unexplained_cost.COST_REASON in r for r in verdict["reasons"])
    [judged] = [w["cost"] for w in verdict["witnesses"] if "cost" in w]
    assert judged["flagged"] and judged["cost_lo_s"] > 0


TOKENS = 256  # decode tokens per sample


def _table(printed: tuple[float, float], extra_s: float,
           *witnesses: dict[str, Any], every_cell: bool = False) -> dict[str, Any]:
    """Two decode cells printed at `printed` x main's 100 tok/s; each process's wall time 3 s
    outside the work plus the work at the printed rates, the head's `extra_s` more (a slowdown
    its rates hide), with a few ms of alternating noise. `every_cell`: under the one rule
    (`witness_every_cell`, margin 1.5%), where a cell no witness times is the wall clock's."""
    doc = results(Doc([C("m", "decode", 128, printed[0]), C("m", "decode", 4096, printed[1])]))
    if every_cell:
        doc["rule"].update(witness_every_cell=True, witness_margin=0.015)
    rates = {(s["pair"], s["side"]): 0.0 for s in doc["cells"][0]["samples"]}
    for c in doc["cells"]:
        for s in c["samples"]:
            rates[s["pair"], s["side"]] += TOKENS / s["value"]
    walls = [{"pair": p, "side": side, "dropped": False, "verified": False,
              "seconds": round(3.0 + work + (extra_s if side == "head" else 0.0)
                               + (0.004 if p % 2 else -0.004), 4)}
             for (p, side), work in sorted(rates.items())]
    doc["witnesses"] = [{"name": "samples:m", "source": "samples", "clock": "wall",
                         "cells": {"m/decode@128": TOKENS, "m/decode@4096": TOKENS},
                         "samples": walls}, *witnesses]
    return grade(validate(doc), DEFAULT)


@pytest.mark.parametrize(("printed", "extra_s", "headline"), [
    ((1.0, 1.0), 0.0, "eval:none"),  # an A/A
    ((1.0, 1.0), 2.56, "eval:inconclusive"),  # decode@4096 at half main's rate, printed as main's
    ((1.0, 1.0), 0.08, "eval:inconclusive"),  # ... at 3% slower
    ((0.5, 1.0), 0.0, "eval:REJECT"),  # the same slowdown printed: regressed, as before
])
def test_the_table(printed, extra_s, headline):
    verdict = _table(printed, extra_s)
    assert verdict["headline"] == headline, verdict["reasons"]


# 1% of decode@4096's work (2.56 s a process): what printing it 1% slower accounts for
COVER_S = TOKENS / 100 * (1 / 0.99 - 1)


@pytest.mark.parametrize(("printed", "extra_s", "headline", "confirmation"), [
    ((1.0, 1.0), 0.0, "eval:none", "unconfirmed"),  # an A/A: each cell ruled in by the wall clock
    ((1.0, 1.0), 0.3 * COVER_S, "eval:inconclusive", unexplained_cost.COST),  # 0.3% hidden
    ((1.0, 1.0), 2.56, "eval:inconclusive", unexplained_cost.COST),  # 2x, as above
    # decode@4096 printed 1.6% slower than main; the wall time has exactly that much more.
    # Either the head is honestly 1.6% slower there, or it runs decode@4096 at main's speed and
    # hides 1.6% of decode@128's work behind the time it printed (an "offset"): the wall clock
    # cannot tell them apart, so a printed slowdown buys no cover, and 1.6% is past the margin
    ((1.0, 0.984), 0.0, "eval:inconclusive", unexplained_cost.NOT_RULED_OUT),
    # ... printed 1% slower: what it could hide is 1% of decode@128's work, within the 1.5%
    # margin, which the wall clock rules out: believed, the printed slowdown `slower`
    ((1.0, 0.99), 0.0, "eval:none", "unconfirmed"),
    ((0.5, 1.0), 0.0, "eval:REJECT", "unconfirmed"),  # a printed regression: the head's word
])
def test_the_table_under_the_one_rule(printed, extra_s, headline, confirmation):
    verdict = _table(printed, extra_s, every_cell=True)
    assert verdict["headline"] == headline, verdict["reasons"]
    cell = next(c for c in verdict["cells"] if c["key"] == "m/decode@128")
    assert cell["confirmation"] == confirmation


def test_under_design_a_a_printed_slowdown_still_counts_as_printed():
    """The rule above is the one rule's: design A's verdicts are as they were (an honest head
    1% slower on one cell is eval:none, its cell `slower`)."""
    verdict = _table((1.0, 0.99), 0.0)
    assert verdict["headline"] == "eval:none", verdict["reasons"]
    assert [c["decision"] for c in verdict["cells"]] == ["neutral", "slower"]


AA_131K = ROOT / "tests" / "data" / "sparkinfer" / "s53-h100" / "aa-131k-floor.results.json"


def _noisy_hidden(doc: dict[str, Any], extra_s: float, jitter_s: float) -> dict[str, Any]:
    """The head's processes `extra_s` longer behind main's rates, each pair's head time moved
    by +-`jitter_s` in turn (a head that adds noise to its own processes)."""
    out = copy.deepcopy(doc)
    for w in out["witnesses"]:
        for s in w["samples"] if w.get("source") == "samples" else []:
            if s["side"] == "head":
                s["seconds"] = round(s["seconds"] + extra_s + (jitter_s if s["pair"] % 2 else
                                                               -jitter_s), 4)
    return out


@pytest.mark.parametrize(("extra_s", "jitter_s", "believed"), [
    (0.0, 0.0, True),  # GPU run 53S's A/A of the 131072 run, 8 pairs
    (0.58, 0.0, False),  # 2% of its 28.2 s prefill, hidden behind main's rate
    (0.58, 1.5, False),  # ... with noise added, which refutes the floor: a wider bound
    (0.0, 1.5, False),  # noise alone: the clock cannot rule 1.5% out either
])
def test_the_wall_clock_rules_the_131072_prefill_in_only_when_it_can(extra_s, jitter_s, believed):
    verdict = grade(validate(_noisy_hidden(_load(AA_131K), extra_s, jitter_s)), DEFAULT)
    [cell] = verdict["cells"]
    assert (cell["decision"] == "neutral") is believed, (cell, verdict["witnesses"])
    assert (verdict["headline"] == "eval:none") is believed


def test_a_hidden_cost_caps_a_confirmed_tier_at_inconclusive():
    """A real gain confirmed on one cell does not carry a slowdown hidden on another: no tier."""
    fast = {"name": "decode-128", "source": "witness", "clock": "handoff",
            "cells": {"m/decode@128": 1000}, "samples": [
                {"pair": p, "side": side, "seconds": s + (0.01 if p % 2 else -0.01),
                 "dropped": False, "verified": True, "agreement": 1.0}
                for p in range(5) for side, s in (("base", 12.0), ("head", 9.0))]}
    honest = _table((1.2, 1.0), 0.0, fast)
    assert honest["headline"] not in ("eval:none", "eval:inconclusive"), honest["reasons"]
    verdict = _table((1.2, 1.0), 2.56, fast)
    assert verdict["tier"] is None and verdict["headline"] == "eval:inconclusive"
    cells = {c["key"]: c for c in verdict["cells"]}
    # the confirmed cell keeps its confirmation (its own work was timed); the other is not
    # believed, and it holds the headline
    assert cells["m/decode@128"]["confirmation"] == "confirmed"
    assert cells["m/decode@4096"]["decision"] == "unconfirmed"
    assert cells["m/decode@4096"]["confirmation"] == unexplained_cost.COST


def test_a_regression_stays_a_regression():
    """The head that prints its slowdown is REJECTed as before: the cost check only ever
    withholds belief, never a REJECT."""
    doc = _load(ROOT / "tests" / "data" / "llamacpp" / "h200-slow.results.json")
    verdict = grade(doc, DEFAULT)
    assert verdict["headline"] == "eval:REJECT"
    assert {c["key"] for c in verdict["cells"] if c["decision"] == "regressed"} == \
        {"qwen3-0p6b-synth/decode@0", "qwen3-0p6b-synth/decode@4096"}


def test_a_cell_printed_slower_lowers_the_saving_a_witness_must_show():
    """An honest head faster on decode and slower on prefill, both in one witness's work: the
    witness shows the difference, which confirms the decode gain (before, only the positive
    claims counted and the honest decode gain was contradicted: `spoofed`, REJECT)."""
    from evalbot.grading import confirmation  # noqa: PLC0415

    samples = [{"pair": p, "side": side, "seconds": s + (0.002 if p % 2 else -0.002),
                "dropped": False, "verified": True, "agreement": 1.0}
               for p in range(6) for side, s in (("base", 1.0), ("head", 0.9))]
    witness = {"name": "w", "source": "witness", "cells": {"decode": 256, "prefill": 1024},
               "samples": samples}
    judged = confirmation.judge(witness, {"decode": (0.3, 0.8), "prefill": (-0.2, 0.2)}, 0.005)
    statuses = {k: c["status"] for k, c in judged["cells"].items()}
    assert statuses == {"decode": "confirmed", "prefill": "unconfirmed"}
    # the same witness with the prefill printed unchanged: the decode claim is contradicted
    judged = confirmation.judge(witness, {"decode": (0.3, 0.8), "prefill": (0.0, 0.2)}, 0.005)
    assert judged["cells"]["decode"]["status"] == "contradicted"


def test_the_compat_label_rests_on_the_harness_time():
    """sparkinfer-compat tiers a confirmed cell on no more gain than its witness allows: a
    printed +40% whose witness allows +5% is tiered as +5%."""
    from evalbot.grading import compat  # noqa: PLC0415

    policy = load_labels(ROOT / "labels.yaml").policy("sparkinfer-compat")
    cell = {"metric": "decode", "ctx": 128, "base_gmean": 100.0, "head_gmean": 140.0,
            "anchor": 0.0}
    printed = compat.cell_label(cell, policy)
    timed = compat.cell_label({**cell, "witness_gain_hi": 0.05}, policy)
    assert printed.gain == pytest.approx(0.4) and timed.gain == pytest.approx(0.05)
    assert printed.tier == "XL" and timed.tier != "XL"


GPU_V6_AA = ROOT / "tests" / "data" / "sparkinfer" / "hidden-h100-v6" / "aa-speed.results.json"


def test_a_cell_its_own_witness_times_is_not_judged_by_whole_process_wall_times():
    """GPU run 53's A/A (H100, sparkinfer v6): the docs-only head's processes took 0.30 s longer
    than main's in both pairs (their printed rates equal), so the samples flag the run; where the
    witnesses time every covered cell, prefill@4096, which its witness timed and ruled a 2%
    slowdown out for, stays unchanged. Under design A the same run's cells are not believed."""
    doc = _load(GPU_V6_AA)
    verdict = grade(doc, DEFAULT)
    [cost] = [w["cost"] for w in verdict["witnesses"] if "cost" in w]
    assert cost["flagged"]
    cells = {c["key"].split("/")[1]: c for c in verdict["cells"]}
    prefill = cells["prefill@4096"]
    assert prefill["decision"] == "neutral" and not prefill.get("time_unaccounted")
    design_a = copy.deepcopy(doc)
    design_a["rule"]["witness_every_cell"] = False
    design_a["witnesses"] = [w for w in design_a["witnesses"] if w["source"] == "samples"]
    assert all(c["confirmation"] == unexplained_cost.COST for c in grade(design_a, DEFAULT)["cells"])


def test_a_cell_no_witness_times_is_still_held_by_the_samples_under_both_ways():
    """The attack on the rule above: a results file without the witness of a cell (a head that
    made it fail to start, a profile that covers less) leaves that cell to the samples' check."""
    doc = _load(GPU_V6_AA)
    doc["witnesses"] = [w for w in doc["witnesses"] if w["name"] != "prefill-4096"]
    verdict = grade(validate(doc), DEFAULT)
    [cell] = [c for c in verdict["cells"] if c["key"].endswith("prefill@4096")]
    assert cell["decision"] == "unconfirmed" and cell["confirmation"] == unexplained_cost.COST
    assert verdict["headline"] == "eval:inconclusive"


def test_two_runs_of_one_model_are_judged_each_on_its_own_wall_clock():
    """sparkinfer's Qwythos sweep and its 131072 run both record `samples:qwythos-9b`: each is
    judged, none hides the other (keyed by name, the second run's judgement replaced the
    first's, and a hidden cost in the first run was never flagged)."""
    doc = _load(AA_131K)
    [clean] = [w for w in doc["witnesses"] if w["source"] == "samples"]
    hiding = copy.deepcopy(_noisy_hidden(doc, 2.0, 0.0)["witnesses"][0])
    doc["witnesses"] = [hiding, clean]
    verdict = grade(validate(doc), DEFAULT)
    costs = [w["cost"]["flagged"] for w in verdict["witnesses"] if "cost" in w]
    assert costs == [True, False]
    [cell] = verdict["cells"]
    assert cell["confirmation"] == unexplained_cost.COST
