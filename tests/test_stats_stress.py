"""Issue 33: the speed rule under what a box does beyond normal noise, on the shipped jobs.

Each defect the statistics audit found has a test here that failed on the rule before it:
1. a slow first test in a third of the processes made sparkinfer's look at 2 pairs give false
   verdicts (20-25% of A/A PRs, most of them REJECTs): no verdict before VERDICT_PAIRS pairs;
2. settling a tier to the precision of its narrowest neighbour cost 2.2-2.8x the fixed-n pairs:
   the tier settles on its own width, away from its neighbours' centres (stats.tier_own);
3. the witness capped the tier at its point gain (biased low as a cap): now at its one-sided
   95% upper bound (confirmation.TIER_CAP_ALPHA);
4. a stale floor (the box noisier than calibrated) gave 1.2-4% A/A false verdicts.
The bench rows run the rule table of bench/verdict_quality.py at a fixed seed (deterministic).
"""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalbot.engine.contract.results import RESULTS_SCHEMA, validate
from evalbot.engine.contract.shared import stats
from evalbot.grading import confirmation
from evalbot.grading.grade import _tier_cell, grade
from evalbot.grading.policy import load_labels
from evalbot.grading.sequential import VERDICT_PAIRS, rule_lists, schedule
from tests.stub_engine import decode_cell
from tests.test_grading import C, _record

ROOT = Path(__file__).resolve().parents[1]
POLICY = load_labels(ROOT / "labels.yaml").policy("default")
SIMS = 1200
EDGES = np.log1p([0.02, 0.035, 0.06, 0.10, 0.18])


def _vq() -> Any:
    sys.path.insert(0, str(ROOT / "bench"))
    import verdict_quality as vq
    return vq


@functools.cache  # 'spark +slow first' is asked twice: its 1,200 simulations once
def _figures(name: str, seed: int = 11) -> Any:
    vq = _vq()
    (sc,) = [s for s in vq.scenarios() if s.name == name]
    return vq.measure(sc, POLICY, SIMS, np.random.default_rng(seed))


STRESS = ["spark +slow first", "spark +throttle", "spark +t(3) tails", "spark +drift",
          "spark stale 2x", "spark 1% (stale 4x)", "H200 +slow first", "H200 +throttle",
          "H200 +t(3) tails", "H200 +drift", "H200 stale 2x"]


@pytest.mark.parametrize("name", STRESS)
def test_no_stress_makes_more_than_one_false_aa_verdict_in_a_hundred(name: str) -> None:
    """Defects 1 and 4: at this seed the rule before gave 'spark +slow first' 26%,
    'spark +throttle' 1.25%, 'spark stale 2x' 1.4%, 'spark 1% (stale 4x)' 4.75% and
    'H200 stale 2x' 1.25%."""
    assert _figures(name).false <= 0.01


def test_a_slow_first_test_is_screened_out_not_left_inconclusive() -> None:
    """Defect 1, then issue 46: the rule waited (no verdict before 5 pairs) and said
    inconclusive in 97% of A/As; the fault screen of rule version 3 drops the faulted pairs and
    decides (tests/test_fault_screen.py)."""
    f = _figures("spark +slow first")
    assert f.false <= 0.01 and f.inconclusive <= 0.05


def test_a_look_below_the_verdict_pairs_gives_no_verdict_but_neutral() -> None:
    """Defect 1, the mechanism: two pairs that share a 10% slow first test (sd 0.3%) are a
    regression under the first look of the old rule, nothing under version 2."""
    old, new = (schedule([2, 5, 8], 18, 0.01, pool_df=9, version=v)[0] for v in (1, 2))
    mean, sd, floor = np.array(math.log(0.9)), np.array(0.003), 0.0035
    assert stats.decide(mean, sd, old, floor, 0.02, 0.02) == stats.REGRESSED
    assert stats.decide(mean, sd, new, floor, 0.02, 0.02) == stats.UNDECIDED
    assert stats.decide(np.array(0.001), sd, new, floor, 0.02, 0.02) == stats.NEUTRAL
    assert stats.decide(-mean, sd, new, floor, 0.02, 0.02, np.log1p([.02, .035, .06, .1, .18])) \
        == stats.UNDECIDED  # not even improving: a verdict needs VERDICT_PAIRS pairs
    later = schedule([2, 5, 8], 18, 0.01, pool_df=9, version=2)[1]
    assert later.pairs >= VERDICT_PAIRS and stats.decide(mean, sd, later, floor, 0.02, 0.02) \
        == stats.REGRESSED


def test_the_last_look_may_always_decide() -> None:
    (only,) = schedule([3], 4, 0.01, pool_df=9, version=2)
    assert only.directional > 0 and only.directional_floor > 0


def test_settling_a_tier_costs_about_the_fixed_n_pairs() -> None:
    """Defect 2: the H200 job at the S centre took 46 pairs (+5%: 45) against a fixed-n minimum
    of 21 (16) for the tier accuracy the rule reached; every tier's centre still gets its tier
    >= 90% of the time."""
    f = _figures("H200 A/A")
    assert min(f.tier) >= 0.9 and f.far == 0.0
    for pairs, fixed, _ in f.effort:
        assert pairs <= 1.3 * fixed


def test_an_estimate_at_the_s_centre_settles_on_the_s_width() -> None:
    """Defect 2, the mechanism: +4.75% with a 1.0% tier half-width is settled under version 2
    (S is 2.5 points wide), not under version 1 (XS next to it is 1.5 wide)."""
    edges = np.log1p([0.02, 0.035, 0.06, 0.10, 0.18])
    m, g = np.array(math.log1p(0.0475)), np.array(0.010)
    assert not stats.tier_settled(m, g, edges) and stats.tier_own(m, g, edges)
    # ... but not when the interval reaches a neighbour's centre (XS at 2.75%)
    assert not stats.tier_own(np.array(math.log1p(0.039)), g, edges)
    assert stats.tier_own(np.array(math.log1p(0.025)), np.array(0.007), edges)
    assert not stats.tier_own(np.array(math.log1p(0.025)), np.array(0.009), edges)


def _witnessed_tier(head_s: float, jitter: float) -> tuple[str | None, dict[str, Any]]:
    """A true +4.75% (tier S) decode cell, estimated so, whose witness (5 pairs; main's
    1,000 tokens take 10 s of its 12) saw `12 - head_s` seconds saved, +-1.5 jitter a pair."""
    samples = []
    for p in range(5):
        j = jitter * (1 if p % 2 else -1)
        samples += [{"pair": p, "side": "base", "seconds": 12.0 + j, "dropped": False,
                     "verified": True},
                    {"pair": p, "side": "head", "seconds": head_s - j / 2, "dropped": False,
                     "verified": True}]
    results = {"rule": {"alpha": 0.01}, "cells": [decode_cell(100.0, 104.75)],
               "witnesses": [{"name": "w", "source": "witness", "cells": {"m/decode@128": 1000},
                              "samples": samples}]}
    cell = {"key": "m/decode@128", "decision": "improved", "tier": None, "lo": 0.01,
            "speedup": 0.0475, "metric": "decode", "compat": None}
    confirmation.confirm(results, [cell])
    assert cell["decision"] == "improved"
    _tier_cell(cell, POLICY)
    return cell["tier"], cell


def test_a_noisy_witness_below_the_tier_does_not_lower_it() -> None:
    """Defect 3: the witness's point gain (+2.9%, XS) is one noisy draw; its 95% upper bound
    (+4.2%) allows the S the estimate says. The old cap gave XS."""
    tier, cell = _witnessed_tier(11.70, 0.068)
    assert cell["witness_gain"] < 0.035 and tier == "S"
    assert 0.035 <= cell["witness_gain_hi"] < 0.0475


def test_a_precise_witness_still_caps_a_printed_claim() -> None:
    """... while a witness whose whole interval lies in XS still caps the printed S."""
    tier, cell = _witnessed_tier(11.70, 0.005)
    assert cell["witness_gain"] < 0.035 and tier == "XS"


def _pooled(ratio: float, version: int) -> dict[str, Any]:
    """One q35 decode cell at `ratio` (+-1% a pair) under the pooled rule of `version`: looks
    [4, 8], a 2% floor of 29 degrees of freedom, the default policy's tier edges."""
    bounds = schedule([4, 8], 1, 0.01, pool_df=29, version=version)
    rule = {"looks": [4, 8], **rule_lists(bounds, version), "equivalence_alpha": 0.05,
            "family": 1, "alpha": 0.01, "sd_floor": 0.02, "sd_floors": {},
            "significance": 0.02, "tolerance": 0.02, "warmup": 1, "budget_s": 600.0,
            "tier_edges": {"q35/decode@128": [float(x) for x in EDGES]}}
    return validate({
        "schema": RESULTS_SCHEMA, "job_id": "t", "profile": "table", "box": {},
        "base": {"sha": "a" * 40, "ok": True}, "head": {"sha": "b" * 40, "ok": True},
        "rule": rule, "models": [{"name": "q35", "path": "/m", "sha256": "0" * 64,
                                  "role": "primary", "namespace": "eval-q35"}],
        "cells": [_record(C("q35", "decode", 128, ratio, noise=0.01), rule)],
        "correctness": None, "failures": []})


def test_a_tier_still_unsettled_at_the_last_look_is_judged_on_its_interval() -> None:
    """The finding of the last bench run: +3% heads got S in 5.7% of PRs, their estimate a
    little above 3.5% at the last look with the tier unsettled. Version 2 tiers such a cell on
    the lower end of its tier interval; version 1 (older results) on its estimate, as before."""
    new, old = (grade(_pooled(1.036, v), POLICY) for v in (2, 1))
    for verdict in (new, old):
        (cell,) = verdict["cells"]
        assert cell["decision"] == "improved" and cell["looks"] == 2 and cell["speedup"] > 0.035
    assert new["tier"] == "XS" and old["tier"] == "S"
    # a settled tier keeps its estimate's: +12% (L) settles at 8 pairs and stays L
    assert grade(_pooled(1.12, 2), POLICY)["tier"] == "L"
