"""A head's claimed saving must be visible in the wall time the harness measured."""

from __future__ import annotations

import numpy as np
import pytest

from evalbot.engine.measure.spoof import Sample, unexplained_saving


def _pairs(base_wall: float, head_wall: float, base_claim: float, head_claim: float,
           n: int = 6, jitter: float = 0.001) -> list[Sample]:
    out = []
    for p in range(n):
        j = jitter * (1 if p % 2 else -1)
        out.append(Sample(p, "base", base_wall + j, base_claim))
        out.append(Sample(p, "head", head_wall - j / 2, head_claim))
    return out


@pytest.mark.parametrize(
    ("samples", "flagged"),
    [
        (_pairs(1.00, 0.70, 0.40, 0.10), False),  # a real 0.3 s saving, seen in the wall time
        (_pairs(1.00, 1.00, 0.40, 0.04), True),  # claims 0.36 s, saves nothing
        (_pairs(1.00, 0.90, 0.40, 0.04), True),  # claims 0.36 s, shows 0.1 s: under half
        (_pairs(1.00, 0.80, 0.40, 0.04), False),  # claims 0.36 s, shows 0.2 s: over half
        (_pairs(1.00, 1.00, 0.40, 0.40), False),  # no claim at all
        (_pairs(1.00, 1.00, 0.0105, 0.0100, jitter=0.05), False),  # claim inside the noise
        (_pairs(1.00, 1.00, 0.40, 0.04, n=2), False),  # too few pairs to say
        (_pairs(1.00, 1.20, 0.40, 0.60), False),  # a slower head is not a spoof
    ],
)
def test_claims_against_wall_time(samples: list[Sample], flagged: bool) -> None:
    reason = unexplained_saving(samples)
    assert (reason is not None) == flagged
    if reason:
        assert "claims to save" in reason


def test_a_small_honest_saving_in_a_busy_box_s_noise_is_no_spoof() -> None:
    # What a CI run saw: the head claims 8.2 ms per sample; three pairs on a busy machine ran
    # 5, 10 and 13.5 ms *longer* on the head. t = 7: a flat 3 sigma called it a spoof, a t test
    # at 99.9% with 2 degrees of freedom (22.3) does not; a precise lie of that size still is.
    noisy = []
    for p, diff in enumerate((-0.005, -0.010, -0.0135)):
        noisy += [Sample(p, "base", 0.300, 0.0282), Sample(p, "head", 0.300 - diff, 0.0200)]
    assert unexplained_saving(noisy) is None
    precise = [Sample(p, side, 0.300, 0.0282 if side == "base" else 0.0200)
               for p in range(3) for side in ("base", "head")]
    assert unexplained_saving(precise) is not None


def test_unpaired_samples_are_ignored() -> None:
    samples = _pairs(1.0, 1.0, 0.4, 0.04)
    assert unexplained_saving([s for s in samples if s.pair != 0 or s.side == "base"])
    assert unexplained_saving(samples[:5]) is None  # pairs 0, 1 full, pair 2 half: too few


def test_a_neutral_head_whose_processes_ran_longer_is_no_spoof() -> None:
    # What a CI run saw: a neutral head "claimed" 0.1 ms a sample (its printed rates scatter
    # around main's) while its processes ran 5.2 ms longer. The shortfall alone is beyond the
    # noise; the claim is not, so there is nothing to contradict.
    rng = np.random.default_rng(7)
    claims = 0.0001 + rng.normal(0, 0.0004, 12)
    walls = -0.0052 + rng.normal(0, 0.001, 12)
    neutral = [s for p in range(12) for s in (Sample(p, "base", 0.300, 0.0282 + claims[p]),
                                              Sample(p, "head", 0.300 - walls[p], 0.0282))]
    assert unexplained_saving(neutral) is None
    # The same wall times under a precise claim of 5 ms: contradicted.
    lie = [s for p in range(12) for s in (Sample(p, "base", 0.300, 0.0332),
                                          Sample(p, "head", 0.300 - walls[p], 0.0282))]
    assert unexplained_saving(lie) is not None
