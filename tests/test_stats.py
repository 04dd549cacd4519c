"""The per-cell rule (engine/stats.py) and its critical values (evalbot/sequential.py)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from engine import speed, stats
from evalbot.sequential import EQUIVALENCE_ALPHA, critical_values, schedule

ROOT = Path(__file__).resolve().parents[1]
S = T = 0.02
UP, DOWN = math.log1p(S), math.log1p(-T)


def bounds(n: int = 8, c: float = 4.0, cf: float = 3.5, e: float = 1.9,
           ef: float = 1.645) -> stats.Bounds:
    return stats.Bounds(n, c, cf, e, ef)


def test_log_ratio_is_oriented_so_positive_means_better() -> None:
    assert stats.log_ratios([100.0], [110.0])[0] == pytest.approx(math.log(1.1))
    assert stats.log_ratios([100.0], [110.0], higher_is_better=False)[0] == \
        pytest.approx(-math.log(1.1))


@pytest.mark.parametrize("base,head,match", [
    ([1.0, 2.0], [1.0], "unpaired"),
    ([1.0, 0.0], [1.0, 1.0], "positive"),
    ([1.0, float("nan")], [1.0, 1.0], "positive"),
])
def test_bad_samples_are_refused(base: list[float], head: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        stats.log_ratios(base, head)


@pytest.mark.parametrize("mean,sd,expected", [
    (UP, 1e-9, "improved"),            # exactly +s, interval far from 0: material
    (UP - 1e-6, 1e-9, "neutral"),      # just below +s, precisely measured: no material change
    (DOWN, 1e-9, "regressed"),
    (DOWN + 1e-6, 1e-9, "slower"),     # inside the tolerance, but significantly slower
    (-0.015, 0.001, "slower"),         # -1.5% [-1.8, -1.2]: not "neutral"
    (0.0, 0.004, "neutral"),
    (0.03, 0.03, "undecided"),         # interval 0.03 +- 0.042: neither excludes 0 nor fits
    (-0.03, 0.03, "undecided"),
    (0.019, 0.004, "undecided"),       # below s but the equivalence interval crosses +s
])
def test_decision_table(mean: float, sd: float, expected: str) -> None:
    code = stats.decide(np.array(mean), np.array(sd), bounds(), 0.0, S, T)
    assert stats.DECISIONS[int(code)] == expected


def test_half_width_is_the_wider_of_t_on_sample_sd_and_z_on_floor() -> None:
    b = bounds(n=4)
    h, e, _ = stats.half_widths(np.array(0.001), 4, b, 0.01)  # floor dominates
    assert float(h) == pytest.approx(3.5 * 0.01 / 2) and float(e) == pytest.approx(1.645 * 0.01 / 2)
    h, e, _ = stats.half_widths(np.array(0.05), 4, b, 0.01)  # sample sd dominates
    assert float(h) == pytest.approx(4.0 * 0.05 / 2) and float(e) == pytest.approx(1.9 * 0.05 / 2)


def test_sequential_stops_at_the_first_decided_look() -> None:
    rng = np.random.default_rng(1)
    r = math.log(1.10) + 0.005 * rng.standard_normal(16)
    sched = schedule([4, 8, 16], family=3, alpha=0.01)
    looks = stats.sequential(r, sched, 0.005, S, T)
    assert [lk.decision for lk in looks] == ["improved"]
    assert looks[0].pairs == 4 and looks[0].lo < looks[0].estimate < looks[0].hi
    assert stats.final_decision(looks) == "improved"


def test_undecided_at_every_look_is_inconclusive() -> None:
    r = np.array([0.05, -0.05] * 4)
    looks = stats.sequential(r, schedule([4, 8], 1, 0.01), 0.01, S, T)
    assert [lk.decision for lk in looks] == ["undecided", "undecided"]
    assert stats.final_decision(looks) == "inconclusive"
    assert stats.final_decision([]) == "inconclusive"


def test_look_needs_its_pairs() -> None:
    with pytest.raises(ValueError, match="only 3 measured"):
        stats.look(np.zeros(3), bounds(n=4), 0.01, S, T)


def test_schedule_is_bonferroni_over_cells_and_looks() -> None:
    sched = schedule([4, 8, 16], family=18, alpha=0.01)
    tail = 0.01 / (2 * 18 * 3)
    for b in sched:
        assert b.directional == pytest.approx(sps.t.isf(tail, b.pairs - 1), abs=1e-6)
        assert b.directional_floor == pytest.approx(sps.norm.isf(tail), abs=1e-6)
        assert b.equivalence == pytest.approx(sps.t.isf(EQUIVALENCE_ALPHA, b.pairs - 1), abs=1e-6)
        assert b.equivalence_floor == pytest.approx(1.644854, abs=1e-6)
    assert [b.directional for b in sched] == sorted((b.directional for b in sched), reverse=True)
    assert critical_values([4, 8, 16], 18, 0.01) == [b.directional for b in sched]


@pytest.mark.parametrize("looks,family,alpha", [([], 3, 0.01), ([1, 4], 3, 0.01),
                                                ([4], 0, 0.01), ([4], 3, 1.5)])
def test_schedule_refuses_bad_input(looks: list[int], family: int, alpha: float) -> None:
    with pytest.raises(ValueError):
        schedule(looks, family, alpha)


def test_first_rule_version_replays_with_one_critical_value() -> None:
    """Results written before the floor/equivalence lists: every test used `critical`."""
    legacy = speed.bounds_of({"looks": [3, 5], "critical": [12.0, 6.0]})
    assert legacy == [stats.Bounds(3, 12.0, 12.0, 12.0, 12.0), stats.Bounds(5, 6.0, 6.0, 6.0, 6.0)]


def test_acceptance_bar_at_one_percent_noise_and_18_cells() -> None:
    """The issue's bar, through the simulator's real-rule path (fixed seed: deterministic)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import verdict_quality as vq

    rng = np.random.default_rng(7)
    noise = vq.synthetic(0.01, heavy=False)
    looks = [4, 8, 12, 16, 24]
    aa = vq.simulate(noise, 18, 0.0, looks, 0.01, 3000, rng)
    assert aa.false <= 0.01 and aa.inconclusive <= 0.05
    assert vq.simulate(noise, 18, 0.03, looks, 0.01, 1500, rng).improved >= 0.95
    # and the single-sample 2% gate it replaces does not meet it
    assert vq.single_sample(noise, 18, 0.0, 3000, rng).false > 0.5
