"""bench/guard_quality.py's one-in-five-windows damage (issue "A verdict in minutes"): each scored
window, short or long, damaged whole with probability 1/5, the PR losing 3 points of top-1 on
average. The REJECT rate comes from the bench's own path: the job job_correctness sends, cut by
segments.py, looked at by correctness_stats.look and decided by correctness_policy.decide."""

from __future__ import annotations

import numpy as np

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
