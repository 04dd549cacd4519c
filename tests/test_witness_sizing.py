"""A witness's last look is sized from the floor the job carries (evalbot/grading/witness_sizing.py,
issue 53): at sparkinfer's H200 floors it is the rule's 2 x the profile's last (16), at the H100's
noise (GPU run 53, tests/data/sparkinfer/hidden-h100*) more, so that an honest A/A's last look
rules out the 2% threshold in all but 1 PR in 1,000; and the box's calibrated floor reaches the
harness's job from `evalbot calibrate`'s A/A."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.job import parse_job
from evalbot.engine.contract.shared.witness_interval import Floor, rules_out
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import load_profile
from evalbot.grading import confirmation, witness_sizing
from evalbot.grading.confirmation import (
    BOTH_WAYS_LAST_LOOK,
    BOTH_WAYS_RULE,
    WITNESS_RULE,
    equivalence_critical,
)
from evalbot.grading.policy import load_labels
from evalbot.grading.sequential import EQUIVALENCE_ALPHA
from evalbot.service.calibrate import witness_noise
from evalbot.store.noise import NoiseStore

ROOT = Path(__file__).resolve().parents[1]
POLICY = load_labels(ROOT / "labels.yaml").policy("default")
H100 = ROOT / "tests" / "data" / "sparkinfer" / "hidden-h100" / "aa-speed.results.json"
LOOKS = (3, 5, 8)
T = 0.02  # sparkinfer's regression threshold
CHECKS = 13  # the cells sparkinfer's witnesses rule in


def _box(tmp_path: Path) -> BoxConfig:
    return BoxConfig(name="h100", kind="local", workdir=str(tmp_path), repo=str(tmp_path))


@pytest.mark.parametrize("sd, df, work_s, last", [
    # the profile's floors (the H200's): the rule's multiple, the fixtures' jobs as they were
    (0.0075, 3, 1.047, 16),   # decode-128
    (0.01, 5, 2.485, 16),     # decode-4096
    (0.0024, 46, 0.64, 16),   # prefill-4096
    # the H100's relative pair sd (GPU run 53) at the H200's work, as calibrated with 12 pairs
    (0.0178, 11, 1.047, 24),  # decode-128: 1.6% of its work a pair
    (0.0367, 11, 2.485, 19),  # decode-4096: 1.4%
    (0.0033, 11, 0.64, 16),   # prefill-4096: 0.45%, 16 pairs are enough
    # the H100's own seconds (0.0203 s of 1.32 s): a slower box's longer work needs fewer pairs
    (0.0203, 11, 1.32, 20),
    # noise no look within the cap can rule 2% out under: the cap, and the room decides
    (0.05, 11, 1.0, witness_sizing.MAX_LAST_LOOK),
    # nothing to size from: no floor, no work
    (0.0, 0, 1.0, 16),
    (0.0178, 11, 0.0, 16),
])
def test_the_last_look_is_sized_from_the_floor(sd: float, df: int, work_s: float,
                                              last: int) -> None:
    assert witness_sizing.last_look(LOOKS, Floor(sd, df), T * work_s, CHECKS, WITNESS_RULE) == last


@pytest.mark.parametrize("sd, df, work_s", [(0.0178, 11, 1.047), (0.0367, 11, 2.485),
                                            (0.0203, 11, 1.32), (0.03, 3, 1.5)])
def test_the_sized_look_is_the_fewest_pairs_that_meet_the_target(sd: float, df: int,
                                                                 work_s: float) -> None:
    floor, delta = Floor(sd, df), T * work_s
    n = witness_sizing.last_look(LOOKS, floor, delta, CHECKS, WITNESS_RULE)
    target = witness_sizing.FALSE_FLAGS_PER_PR / CHECKS
    assert BOTH_WAYS_LAST_LOOK * LOOKS[-1] < n < witness_sizing.MAX_LAST_LOOK
    assert witness_sizing.miss(n, (*LOOKS, n), floor, delta, WITNESS_RULE) <= target
    assert witness_sizing.miss(n - 1, (*LOOKS, n - 1), floor, delta, WITNESS_RULE) > target


@pytest.mark.parametrize("sd, floor_sd, df, n", [
    (0.03, 0.03, 11, 16),    # the floor is the box's noise: pooled half the time
    (0.03, 0.0075, 3, 16),   # a floor 4x too small: the guard judges on the own sd
    (0.02, 0.02, 46, 8),     # a floor of many df
])
def test_the_miss_chance_is_the_bots_own_test(sd: float, floor_sd: float, df: int,
                                             n: int) -> None:
    """The chance `miss` integrates is what the bot's judgement (`rules_out` at the look's
    critical values) does on A/A pairs of that sd: 6,000 drawn looks, within 4 standard errors."""
    floor, delta, base_s = Floor(floor_sd, df), T * 1.32, 1.32
    looks = (*LOOKS, n) if n > LOOKS[-1] else LOOKS
    crit = equivalence_critical(looks, n, floor, WITNESS_RULE)
    assert crit is not None
    rng, draws = np.random.default_rng(53), 6000
    missed = sum(not rules_out(rng.normal(0.0, sd, n), base_s, crit, floor, -delta)
                 for _ in range(draws))
    p = witness_sizing.miss(n, looks, floor, delta, WITNESS_RULE, sd)
    assert 0.02 < p < 0.2  # a chance the draws can measure
    assert abs(missed / draws - p) < 4 * math.sqrt(p * (1 - p) / draws)


def test_the_profile_floors_leave_every_shipped_job_as_it_was(tmp_path: Path) -> None:
    """At the profile's own floors no sparkinfer witness needs more than the rule's multiple:
    the jobs (and every fixture recorded under them) are what they were."""
    job = make_job(load_profile("sparkinfer"), POLICY, _box(tmp_path), "a" * 40, "b" * 40)
    for run in job.runs:
        for spec in run.witnesses:
            profile_looks = spec.looks[:-1]
            assert spec.looks[-1] == BOTH_WAYS_LAST_LOOK * profile_looks[-1], spec.name


def test_the_box_s_calibrated_floor_reaches_the_harness_and_sizes_its_looks(
        tmp_path: Path) -> None:
    """The trace: the H100's A/A (GPU run 53) as `evalbot calibrate` reads it, stored in the
    noise store, read back for the next job, written as job.json and parsed as the harness
    parses it: decode-128 and decode-4096 carry the H100's floor and a last look past 16, with a
    critical value per look; prefill-4096's noise needs none."""
    noise = witness_noise(json.loads(H100.read_text()))
    store = NoiseStore(tmp_path / "store.sqlite")
    store.record("h100", "sparkinfer", "a" * 40, noise)
    floors, df = store.floors("h100", "sparkinfer"), store.degrees("h100", "sparkinfer")
    store.close()
    job = make_job(load_profile("sparkinfer"), POLICY, _box(tmp_path), "a" * 40, "b" * 40,
                   sd_floors=floors, floor_df=df)
    parsed = parse_job(json.loads(job.to_json()))
    specs = {w.name: w for run in parsed.runs for w in run.witnesses}
    for name, longer in (("decode-128", True), ("decode-4096", True), ("prefill-4096", False)):
        spec, (sd, _) = specs[name], noise[f"witness:{name}"]
        assert spec.sd_floor_s == pytest.approx(sd) and spec.floor_df == df == 4
        assert (spec.looks[-1] > 16) is longer and spec.pairs == spec.looks[-1]
        assert len(spec.equivalence_t) == len(spec.pooled_equivalence_t) == len(spec.looks)
    # witnesses the A/A did not time keep the profile's floor and its looks
    assert specs["decode-32768"].looks == (3, 5, 8, 16)


def test_a_witness_without_work_keeps_the_rule_s_multiple(tmp_path: Path) -> None:
    """`work_s` is what sizes: a profile witness without it gets 2 x its last look whatever
    its floor (the demo's and llamacpp's today)."""
    profile = load_profile("sparkinfer")
    runs = tuple(replace(r, witnesses=tuple(replace(w, work_s=0.0) for w in r.witnesses))
                 for r in profile.runs)
    floors = {f"witness:{w.name}": 0.05 for r in runs for w in r.witnesses}
    job = make_job(replace(profile, runs=runs), POLICY, _box(tmp_path), "a" * 40, "b" * 40,
                   sd_floors=floors, floor_df=11)
    assert {w.looks[-1] for run in job.runs for w in run.witnesses} == {16}


# --- rule 3: the alpha split of a sized witness, and the room its looks need ------------------

@pytest.mark.parametrize("last", [16, 24, 29, 64])
def test_a_sized_last_look_takes_no_alpha_from_the_early_looks(last: int) -> None:
    """Rule 3: confirmation's early looks keep the shares rule 2 gave them with the last look at
    2 x the profile's (so an honest gain confirms at the same looks on a noisy box), and the
    equivalence bound's alpha is the same at every look; both sum to their level."""
    looks, unsized = (*LOOKS, last), (*LOOKS, BOTH_WAYS_LAST_LOOK * LOOKS[-1])
    confirm = confirmation.look_alphas(looks, 0.005, BOTH_WAYS_RULE)
    assert confirm == pytest.approx(confirmation.look_alphas(unsized, 0.005, WITNESS_RULE))
    assert sum(confirm) == pytest.approx(0.005)
    equivalence = confirmation.equivalence_alphas(looks, BOTH_WAYS_RULE)
    assert equivalence == pytest.approx([EQUIVALENCE_ALPHA / 4] * 4)
    for n, share in zip(looks, equivalence, strict=True):  # the bot judges at the look reached
        assert confirmation.equivalence_alpha_at(looks, n, BOTH_WAYS_RULE) == share
    # rule 2 as it was: the squares of the looks, for the results that recorded it
    assert confirmation.equivalence_alphas(looks, WITNESS_RULE) == pytest.approx(
        confirmation.look_alphas(looks, EQUIVALENCE_ALPHA, WITNESS_RULE))


def test_only_the_sized_witnesses_move_to_rule_3(tmp_path: Path) -> None:
    """sparkinfer's witnesses, the demo's decode-1024 (a `work_s` each, demo profile v7) and
    llamacpp's depth witnesses (profile v7) record rule 3; the demo's other two and llamacpp's
    prefill-4k-decode-896 (both ways, no work to size from: its span holds an uncredited
    prefill) keep rule 2, their jobs as they were."""
    def versions(name: str) -> dict[str, int]:
        job = make_job(load_profile(name), POLICY, _box(tmp_path), "a" * 40, "b" * 40)
        return {w.name: w.rule_version for run in job.runs for w in run.witnesses}

    assert set(versions("sparkinfer").values()) == {BOTH_WAYS_RULE}
    assert versions("demo") == {"decode-64": WITNESS_RULE, "prefill-1024": WITNESS_RULE,
                                "decode-1024": BOTH_WAYS_RULE}
    assert versions("llamacpp") == {"prefill-4k-decode-896": WITNESS_RULE,
                                    "decode-0": BOTH_WAYS_RULE,
                                    "prefill-4096-at-4096": BOTH_WAYS_RULE}


def test_the_demos_decode_1024_rules_an_aa_in_at_the_suite_under_loads_noise(tmp_path) -> None:
    """CI's `neutral` demo came out inconclusive: decode-1024's 12-pair last look could not rule
    out a 30% slowdown of decode@1024 at a pair sd of about 0.19 s (a suite beside busy loops),
    a miss in 14% of A/As there. Sized from its floor, its last look misses in under 0.1%."""
    job = make_job(load_profile("demo"), POLICY, _box(tmp_path), "a" * 40, "b" * 40)
    [spec] = [w for run in job.runs for w in run.witnesses if w.name == "decode-1024"]
    floor = Floor(spec.sd_floor_s, spec.floor_df)
    last = spec.looks[-1]
    delta = 0.3 * spec.work_s
    before = witness_sizing.miss(12, (3, 6, 12), Floor(0.12, 15), delta, BOTH_WAYS_RULE, sd_s=0.19)
    assert before > 0.1  # profile v6: its floor 0.12 s and rule 2's last look, 2 x 6 pairs
    assert witness_sizing.miss(last, spec.looks, floor, delta, BOTH_WAYS_RULE, sd_s=0.2) < 0.001
    assert job.rule.witness_share * job.rule.budget_s >= 2 * last * 1.6  # its pairs fit


def _h100_job(tmp_path: Path, profile=None, scale: float = 1.0):
    """sparkinfer's job with the H100's witness noise (GPU run 53) as the box's calibration,
    every witness's floor `scale` times it (those the A/A did not time: 0.0178 s)."""
    noise = witness_noise(json.loads(H100.read_text()))
    profile = profile or load_profile("sparkinfer")
    floors = {f"witness:{w.name}": scale * noise.get(f"witness:{w.name}", (0.0178, 0))[0]
              for r in profile.runs for w in r.witnesses}
    return make_job(profile, POLICY, _box(tmp_path), "a" * 40, "b" * 40, sd_floors=floors,
                    floor_df=11)


def test_the_room_grows_as_the_most_a_last_look_grew(tmp_path: Path) -> None:
    """At the profile's floors the share is the profile's; where the box's floors size the last
    looks past 2 x the profile's, it grows as the most any of them grew, so every witness can
    reach its sized look where the profile's could reach theirs."""
    profile = load_profile("sparkinfer")
    shipped = make_job(profile, POLICY, _box(tmp_path), "a" * 40, "b" * 40)
    assert shipped.rule.witness_share == profile.speed.witness_share == 1.5
    noisy = _h100_job(tmp_path)
    grown = max(w.looks[-1] / (BOTH_WAYS_LAST_LOOK * w.looks[-2]) if len(w.looks) > 2 else 1.0
                for run in noisy.runs for w in run.witnesses)
    assert grown > 1.5  # decode-128's last look is 29 pairs, not 16
    assert noisy.rule.witness_share == pytest.approx(1.5 * grown, abs=1e-3)
    assert parse_job(json.loads(noisy.to_json())).rule.witness_share == noisy.rule.witness_share


def test_the_room_stops_at_the_profile_s_hard_cap(tmp_path: Path) -> None:
    """A box so noisy that every last look hits MAX_LAST_LOOK: the share grows to the cap, the
    room at the profile's pace no more than its max_budget_s (else MAX_ROOM_SCALE x the share);
    beyond it the witnesses are cut and their cells not believed (tests/test_hidden_h100_noise.py)."""
    profile = load_profile("sparkinfer")
    job = _h100_job(tmp_path, scale=5.0)
    assert max(w.looks[-1] for run in job.runs for w in run.witnesses) == \
        witness_sizing.MAX_LAST_LOOK
    assert job.rule.witness_share == pytest.approx(1.5 * 64 / 16)  # 6: under 14400 / 1800
    tight = replace(profile, speed=replace(profile.speed, max_budget_s=3600.0))
    assert _h100_job(tmp_path, tight, 5.0).rule.witness_share == pytest.approx(3600 / 1800)
    unscaled = replace(profile, speed=replace(profile.speed, max_budget_s=None, budget_pace_s=None))
    assert _h100_job(tmp_path, unscaled, 5.0).rule.witness_share == \
        pytest.approx(min(1.5 * witness_sizing.MAX_ROOM_SCALE, 1.5 * 64 / 16))
    # never below the profile's share, whatever the looks
    assert witness_sizing.room_share(1.5, [(16, 16)], 1800.0, 14400.0) == 1.5
    assert witness_sizing.room_share(1.5, [], 1800.0, None) == 1.5
