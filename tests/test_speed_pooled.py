"""The pooled rule on real runs: the harness's looks (run-wide calibration test, tier settling)
are what `evalbot grade` replays, and a budget spent before a run's first look is inconclusive.

Same stub engine and repository as tests/test_speed_harness.py; the profile is the stub's with
floors that carry degrees of freedom (the pooled rule) and a second, tiny-budget variant.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from evalbot.config.errors import EvalbotError
from evalbot.engine.contract.shared import replay
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import Profile, load_profile
from evalbot.grading.grade import grade
from evalbot.service.calibrate import aa_noise
from tests.test_speed_harness import PARSE, POLICY, PROFILE, _box, _run, repo  # noqa: F401


@pytest.fixture(scope="module")
def pooled(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    root = tmp_path_factory.mktemp("pooled")
    (root / "state").mkdir()
    text = PROFILE.format(state=root / "state", zeros="0" * 64, parse=PARSE)
    text = text.replace("  sd_floor: 0.01\n", "  sd_floor: 0.014\n  sd_floor_df: 11\n")
    path = root / "stub.yaml"
    path.write_text(text)
    return load_profile(str(path))


@pytest.mark.parametrize("variant,kind", [("faster", "improved"), ("neutral", "neutral"),
                                          ("noisy", "inconclusive")])
def test_pooled_harness_looks_are_what_grade_replays(repo: tuple[Path, dict[str, str]],  # noqa: F811
                                                    pooled: Profile, tmp_path: Path,
                                                    variant: str, kind: str) -> None:
    path, shas = repo
    job = make_job(pooled, POLICY, _box(path, tmp_path), shas["main"], shas[variant],
                   job_id=f"pooled-{variant}")
    assert job.rule.pool_df == 11 and job.rule.guard and job.rule.tier_edges
    results = _run(job, tmp_path)
    assert results["failures"] == []
    replayed = replay.replay_all(results["cells"], results["rule"])
    for record, looks in zip(results["cells"], replayed, strict=True):
        assert [lk.to_dict() for lk in looks] == record["looks"], replay.cell_key(record)
    verdict = grade(results, POLICY)  # raises if any recorded look disagrees
    assert verdict["kind"] == kind
    if kind == "improved":  # +40%: XL, settled in the wide top tier
        assert verdict["best_cell"] == "m/decode@4096" and verdict["tier"] == "XL"
    if kind == "inconclusive":  # 15% noise: the run's cells refute the 1.4% calibration
        noisy = next(c for c in results["cells"] if replay.cell_key(c) == "m/decode@128")
        assert noisy["looks"][0]["sd"] > 0.05


def test_a_budget_spent_before_the_first_look_is_inconclusive(
        repo: tuple[Path, dict[str, str]], pooled: Profile, tmp_path: Path) -> None:  # noqa: F811
    path, shas = repo
    job = make_job(pooled, POLICY, _box(path, tmp_path), shas["main"], shas["neutral"],
                   job_id="pooled-budget")
    # no warm-up: no pace of main's to reserve a first verdict look by (speed.py
    # `_reserve_first_verdict`), so the spent budget stops the run before any look
    job = dataclasses.replace(job, rule=dataclasses.replace(job.rule, budget_s=1e-3, warmup=0))
    results = _run(job, tmp_path)
    assert {c["stopped"] for c in results["cells"]} == {"budget"}
    assert all(not c["looks"] for c in results["cells"])
    verdict = grade(results, POLICY)
    assert verdict["kind"] == "inconclusive" and verdict["headline"] == "eval:inconclusive"


def test_calibration_refuses_a_cell_without_noise() -> None:
    samples = [{"side": side, "value": 100.0, "pair": i, "dropped": False}
               for i in range(6) for side in ("base", "head")]
    doc = {"failures": [], "cells": [{"model": "m", "metric": "decode", "ctx": 128,
                                      "higher_is_better": True, "samples": samples}]}
    with pytest.raises(EvalbotError, match="measured no noise"):
        aa_noise(doc)
