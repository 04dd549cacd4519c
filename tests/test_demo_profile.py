"""The cut demo profile (tests/demo_profile.py) the flow tests run: the shipped profile's settings
with its witnessed cell only, deciding the demo's PRs at least as surely as the shipped one.

The decision code is the harness's (engine.contract.shared.stats.sequential over the job's schedule);
the per-pair noise of decode@64 is drawn at 2-4x what a busy box showed (sd 0.1-0.2 at a load of
4 on 2 cores; a CI run's `faster` saw 0.36-0.54), seeded. At 4x the shipped profile itself
leaves a fifth of the runs undecided: the cut one fewer."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import yaml

from evalbot.config.settings import REPO_ROOT, BoxConfig
from evalbot.engine.contract.shared import stats
from evalbot.engine.contract.shared.replay import bounds_of
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import PROFILES_DIR, Profile, load_profile
from evalbot.grading.policy import load_labels
from tests.demo_profile import cut_demo_profile, cut_share

POLICY = load_labels(REPO_ROOT / "labels.yaml").policy("default")
KEY = "tiny/decode@64"
FASTER = np.log(2.16)  # the `faster` PR's decode@64 (evalbot/profiles/demo.yaml)
SIMS = 2000


def _decisions(profile: Profile, effect: float, sd: float, seed: int) -> tuple[list[str], float]:
    """The decode@64 cell's final decision in SIMS simulated runs, and the mean pairs measured."""
    box = BoxConfig(name="local", kind="local", workdir="/w", repo="/r", models_dir="/m")
    rule = make_job(profile, POLICY, box, "a" * 40, "b" * 40, seed=1).rule
    schedule = bounds_of(asdict(rule))
    rng = np.random.default_rng(seed)
    out, pairs = [], 0
    for ratios in rng.normal(effect, sd, size=(SIMS, rule.looks[-1])):
        looks = stats.sequential(ratios, schedule, rule.sd_floors.get(KEY, rule.sd_floor),
                                 rule.significance, rule.tolerance, rule.tier_edges.get(KEY))
        out.append(stats.final_decision(looks))
        pairs += looks[-1].pairs
    return out, pairs / SIMS


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Profile, Profile]:
    return load_profile("demo"), load_profile(str(cut_demo_profile(tmp_path_factory.mktemp("p"))))


def test_the_cut_profile_is_the_shipped_one_with_its_witnessed_cell_only(tmp_path: Path) -> None:
    shipped = yaml.safe_load((PROFILES_DIR / "demo.yaml").read_text())
    cut = yaml.safe_load(cut_demo_profile(tmp_path).read_text())
    [run], [cut_run] = shipped["speed"].pop("runs"), cut["speed"].pop("runs")
    assert cut_run.pop("cells") == [{"metric": "decode", "ctx": 64}]
    run.pop("cells")
    # the witness of its cell (the shipped profile witnesses every cell since version 5)
    assert cut_run.pop("witnesses") == [w for w in run.pop("witnesses") if w["name"] == "decode-64"]
    assert cut_run == run  # the same argv and parser
    # looks, floors, budget; the witness's share of box time grows as the samples shrink
    assert cut["speed"].pop("witness_share") == cut_share(shipped["speed"].pop("witness_share"))
    assert cut["speed"] == shipped["speed"]
    assert {k: cut[k] for k in ("build", "env", "models")} == \
        {k: shipped[k] for k in ("build", "env", "models")}
    assert cut["correctness"]["long_windows"] == 0
    for key in ("long_windows", "long_window_tokens"):
        shipped["correctness"].pop(key)
        cut["correctness"].pop(key, None)
    assert cut["correctness"] == shipped["correctness"]


# decode@64's sd per pair: ~0.15 on a busy box; 2x, 3x and 4x that
@pytest.mark.parametrize(("sd", "at_least"), [(0.3, 0.999), (0.45, 0.99), (0.6, 0.0)])
def test_the_faster_pr_is_improved_at_two_to_three_times_the_busy_noise(profiles, sd, at_least):
    shipped, cut = profiles
    got, pairs = _decisions(cut, FASTER, sd, seed=int(sd * 100))
    shipped_got, shipped_pairs = _decisions(shipped, FASTER, sd, seed=int(sd * 100))
    assert got.count("improved") >= at_least * SIMS, {d: got.count(d) for d in set(got)}
    # one cell, its alpha not split three ways: surer than the shipped profile, on fewer pairs
    assert got.count("improved") >= shipped_got.count("improved")
    assert pairs <= shipped_pairs


@pytest.mark.parametrize("sd", [0.3, 0.6])
def test_a_neutral_pr_is_never_called_improved_or_regressed(profiles, sd) -> None:
    _, cut = profiles
    got, _ = _decisions(cut, 0.0, sd, seed=int(sd * 1000))
    assert got.count("improved") + got.count("regressed") <= 0.01 * SIMS, \
        {d: got.count(d) for d in set(got)}
