"""bench/guard_quality.py's one-in-five-windows damage (issue "A verdict in minutes"): each scored
window, short or long, damaged whole with probability 1/5, the PR losing 3 points of top-1 on
average. The REJECT rate comes from the bench's own path: the job job_correctness sends, cut by
segments.py, looked at by correctness_stats.look and decided by correctness_policy.decide."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from bench import guard_quality
from evalbot.config.settings import REPO_ROOT
from evalbot.grading.policy import load_labels

POLICY = load_labels(REPO_ROOT / "labels.yaml").policy("default").correctness
WINDOW_DAMAGE = next(case for case, _, _ in guard_quality.CASES
                     if case.where == "window" and not case.disc)


def test_a_damaged_window_loses_every_piece_and_the_pr_loses_3_points_on_average() -> None:
    plan = guard_quality.schedule("llamacpp", POLICY)
    windows = np.array(plan.windows)
    rng = np.random.default_rng(7)
    for _ in range(50):  # a long window's pieces: all damaged or none
        hit = guard_quality.damaged(rng, plan, "window")
        assert all(len(set(hit[windows == w].tolist())) == 1 for w in set(plan.windows))
    first = plan.looks[0]  # every evaluation scores its first look whole
    lost = scored = 0
    for _ in range(200):
        chunks = guard_quality.simulate(rng, plan, WINDOW_DAMAGE, POLICY, {})["chunks"][:first]
        lost += sum(c["base_top1"] - c["head_top1"] for c in chunks)
        scored += sum(c["positions"] for c in chunks)
    assert abs(lost / scored - guard_quality.LOSS) < 0.01, lost / scored


def test_the_shipped_profiles_reject_it_where_long_windows_scored_everywhere_did_not(
        tmp_path: Path) -> None:
    """The same damage on the llamacpp profile as it was (8 short windows, long windows scored at
    every position: the 66k shallow positions dilute the short windows' damage, and 1 PR in 9
    draws no damaged window of 10) and as shipped."""
    doc = yaml.safe_load((REPO_ROOT / "evalbot" / "profiles" / "llamacpp.yaml").read_text())
    doc["correctness"].update(windows=8, looks=[32, 96, 224], long_scored="all")
    before = tmp_path / "llamacpp-before.yaml"
    before.write_text(yaml.safe_dump(doc))
    rates = {}
    for name in ("llamacpp", "sparkinfer", str(before)):
        plan = guard_quality.schedule(name, POLICY)
        rng = np.random.default_rng(3)
        floors = guard_quality.calibrated(plan, POLICY, rng)
        got = guard_quality.rate(plan, WINDOW_DAMAGE, "reject", 40, POLICY, rng, floors)
        rates[name] = got.hits / got.runs
    assert rates["llamacpp"] >= 0.9 and rates["sparkinfer"] >= 0.9, rates
    assert rates[str(before)] <= 0.6, rates  # ~36%: REJECTed only when a long window is hit
