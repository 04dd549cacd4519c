"""Table tests of the pure correctness decision: recorded chunks in, decision and reasons out."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from evalbot.config.errors import ResultsError
from evalbot.config.settings import REPO_ROOT, BoxConfig
from evalbot.engine.contract.job import parse_job
from evalbot.engine.contract.shared.correctness_stats import mcnemar_worse, sequential
from evalbot.engine.contract.shared.segments import chunk_looks
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import load_profile
from evalbot.grading.correctness_policy import ALPHA, calibrate_floors, critical_values, decide
from evalbot.grading.policy import CorrectnessPolicy, load_labels

POLICY = CorrectnessPolicy(margin=0.01, kl_margin=0.02, top1_floor=0.90, kl_ceiling=0.20)
LOOKS = [8, 16, 32, 112]


def chunks(k: int, n: int, base: float, head_only: int, base_only: int, kl_base: float = 0.01,
           kl_head: float | None = None, spread: int = 0) -> list[dict[str, Any]]:
    """k windows of n tokens; `spread` moves discordant tokens between windows (clustering)."""
    kl_head = kl_base if kl_head is None else kl_head
    out = []
    for i in range(k):
        shift = spread * (1 if i % 2 else -1)
        ho, bo = max(head_only + shift, 0), max(base_only + shift, 0)
        b1 = int(base * n) - (i % 3)
        out.append({"window": i, "kind": "short", "positions": n, "base_top1": b1,
                    "head_top1": b1 + ho - bo, "head_only_right": ho, "base_only_right": bo,
                    "base_kl_sum": kl_base * n * (1 + 0.1 * (i % 2)),
                    "head_kl_sum": kl_head * n * (1 + 0.1 * (i % 2)),
                    "base_kl_sq_sum": 2 * kl_base**2 * n, "head_kl_sq_sum": 2 * kl_head**2 * n,
                    "kl_diff_sum": (kl_head - kl_base) * n * (1 + 0.1 * (i % 2)),
                    "kl_diff_sq_sum": (kl_head - kl_base) ** 2 * n + 1e-6 * n})
    return out


def section(all_chunks: list[dict[str, Any]], identical: bool = False,
            policy: CorrectnessPolicy = POLICY, **extra: Any) -> dict[str, Any]:
    """What the harness records: looks applied in rounds, stopping at the first decision."""
    critical = critical_values(LOOKS)
    looks = sequential(all_chunks, LOOKS, critical, policy.margin, policy.kl_margin, ALPHA)
    if identical:
        looks = looks[:1]
    return {"seed": 5, "path": "score path", "identical": identical,
            "chunks": all_chunks[: looks[-1]["chunks"]], "looks": looks,
            "rule": {"looks": LOOKS, "critical": critical, "alpha": ALPHA,
                     "margin": policy.margin, "kl_margin": policy.kl_margin}, **extra}


CASES = [
    # name, chunks (k windows of n tokens), identical, expected decision
    ("bit-identical", chunks(32, 256, 0.93, 0, 0), True, "inert"),
    ("equivalent, 2% discordance", chunks(32, 256, 0.93, 3, 3, spread=1), False, "pass"),
    ("equivalent, 20% discordance, clustered",
     chunks(32, 1024, 0.93, 102, 102, spread=40), False, "pass"),
    ("worse by 10 points", chunks(32, 256, 0.93, 2, 28), False, "reject"),
    ("worse by 1 point (at the margin): undecided at the cap",
     chunks(32, 256, 0.93, 10, 13, spread=4), False, "inconclusive"),
    ("KL rose by 0.1 nats", chunks(32, 256, 0.93, 2, 2, kl_head=0.11, spread=1), False, "reject"),
]


@pytest.mark.parametrize("name, recorded, identical, expected", CASES, ids=[c[0] for c in CASES])
def test_decision_table(name: str, recorded: list[dict[str, Any]], identical: bool,
                        expected: str) -> None:
    verdict = decide(section(recorded, identical), POLICY)
    assert verdict["decision"] == expected, verdict["reasons"]
    assert verdict["seed"] == 5 and verdict["path"] == "score path"
    if expected == "reject":
        assert verdict["reasons"]


def test_grows_until_decided() -> None:
    noisy = section(chunks(32, 1024, 0.93, 102, 102, spread=40))
    assert [lk["decision"] for lk in noisy["looks"]][-1] == "pass"
    assert len(noisy["looks"]) > 1  # 8 windows were not enough: the guard scored more
    assert len(section(chunks(32, 1024, 0.93, 3, 3, spread=1))["looks"]) == 1


def test_floors_reject_a_head_below_them_less_the_margin_when_main_clears_them() -> None:
    rec = chunks(32, 1000, 0.995, 0, 25)  # head 0.97: below the 0.99 floor less 1 point
    verdict = decide(section(rec, floors={"top1": 0.99, "kl": 0.02}), POLICY)
    assert verdict["decision"] == "reject"
    assert verdict["floors"]["calibrated"]


def test_a_head_within_the_margin_is_never_rejected_through_a_floor() -> None:
    """The issue's case: main at 0.90 on the 0.90 floor, head 0.7 points worse (inside the
    1-point margin): the floor used to REJECT it 8.5-32% of the time."""
    rec = chunks(112, 256, 0.905, 4, 6, spread=2)  # head 0.7 points below main
    verdict = decide(section(rec, floors={"top1": 0.90, "kl": 0.2}), POLICY)
    assert verdict["diff_top1"]["mean"] == pytest.approx(-0.0078, abs=1e-3)
    assert verdict["decision"] != "reject", verdict["reasons"]


def test_main_below_the_floor_is_an_unusable_reference_never_a_pass() -> None:
    rec = chunks(32, 256, 0.80, 3, 3, spread=1)  # main itself reads 0.80 against a 0.90 floor
    verdict = decide(section(rec), POLICY)
    assert verdict["decision"] == "infra-error" and verdict["drift"]
    assert any("reference is unusable" in r for r in verdict["reasons"])


def test_a_garbage_reference_with_a_flat_broken_head_is_no_pass() -> None:
    """The issue's case: a reference nothing agrees with and a head as broken (both near 0
    top-1): the paired look passes at the first look, the verdict must not."""
    rec = chunks(32, 128, 0.01, 0, 0, kl_base=5.0)
    verdict = decide(section(rec), POLICY)
    assert verdict["decision"] == "infra-error"


def _consistency(head_gaps: list[float | None], base_gaps: list[float | None]) -> dict[str, Any]:
    return {"checked": True, "tie_nats": 0.01, "max_mismatch": 0.0,
            "cells": [{"key": "tiny/decode@64", "ctx": 64, "side": "base", "decode": [],
                       "gaps": base_gaps},
                      {"key": "tiny/decode@64", "ctx": 64, "side": "head", "decode": [],
                       "gaps": head_gaps}]}


@pytest.mark.parametrize("head, base, rejected", [
    ([0.0] * 32, [0.0] * 32, False),
    ([0.0] * 31 + [0.004], [0.0] * 32, False),  # a near-tie within the tolerance
    ([0.0] * 31 + [0.5], [0.0] * 32, True),
    ([0.0] * 31 + [None], [0.0] * 32, True),  # the greedy token is not even in the top-k
    ([0.0] * 32, [0.0] * 31 + [0.5], False),  # main's own mismatch is not the PR's REJECT
])
def test_speed_score_consistency(head: list[float | None], base: list[float | None],
                                 rejected: bool) -> None:
    rec = section(chunks(32, 256, 0.93, 0, 0), identical=True,
                  consistency=_consistency(head, base))
    verdict = decide(rec, POLICY)
    assert (verdict["decision"] == "reject") == rejected
    assert verdict["consistency"]["head_mismatch"] == rejected


def test_replay_catches_a_tampered_record() -> None:
    good = section(chunks(32, 1024, 0.93, 102, 102, spread=40))
    lied = copy.deepcopy(good)
    lied["looks"][0]["decision"] = "pass"
    with pytest.raises(ResultsError, match="disagree with the replay"):
        decide(lied, POLICY)
    loose = copy.deepcopy(good)
    loose["rule"]["critical"] = [1.0] * len(LOOKS)
    with pytest.raises(ResultsError, match="critical values"):
        decide(loose, POLICY)
    early = section(chunks(32, 256, 0.93, 2, 28))
    early["chunks"] = chunks(16, 256, 0.93, 2, 28)  # scored on after the look that decided
    early["looks"] = early["looks"] + early["looks"]
    with pytest.raises(ResultsError, match="past the look"):
        decide(early, POLICY)


def test_regrade_under_a_wider_margin_uses_its_margin() -> None:
    rec = section(chunks(32, 256, 0.93, 5, 13, spread=2))  # about 3 points worse
    assert decide(rec, POLICY)["decision"] == "reject"
    wide = CorrectnessPolicy(margin=0.10, kl_margin=0.02, top1_floor=0.9, kl_ceiling=0.2)
    assert decide(rec, wide)["decision"] == "pass"


def test_mcnemar_is_exact() -> None:
    assert mcnemar_worse(0, 0) == 1.0
    assert mcnemar_worse(0, 7) == pytest.approx(0.5**7)
    assert mcnemar_worse(3, 10) == pytest.approx(0.046142578125)
    assert mcnemar_worse(10, 3) == pytest.approx(1 - 0.011230468750, abs=1e-12)


def test_critical_values_are_bonferroni_t_quantiles() -> None:
    one, three = critical_values([16]), critical_values([16, 32, 64])
    assert three[0] > one[0]  # three looks share the alpha
    assert three == sorted(three, reverse=True)  # more windows, more degrees of freedom
    with pytest.raises(ValueError):
        critical_values([1, 2])


def test_calibrated_floors_sit_below_main() -> None:
    floors = calibrate_floors([section(chunks(32, 256, 0.95, 0, 0), identical=True)], POLICY)
    # main's own lowest lower bound and highest upper bound: the rule adds the margins
    assert 0.90 < floors["top1"] < 0.95 and floors["kl"] >= 0.0105


def test_the_job_carries_the_schedule_and_survives_json() -> None:
    policy = load_labels(REPO_ROOT / "labels.yaml").policy("default")
    box = BoxConfig(name="b", kind="local", workdir="/tmp/w", repo="/tmp/r")
    job = make_job(load_profile("demo"), policy, box, "a" * 40, "b" * 40, seed=3)
    spec = job.correctness
    assert spec is not None and spec.seed == 3 and spec.looks[0] == spec.windows + 2
    assert spec.critical == critical_values(chunk_looks(spec, spec.looks))
    assert spec.margin == policy.correctness.margin
    assert spec.deep_critical == 0  # the demo has no deep positions (long_score_tokens)
    again = parse_job(json.loads(job.to_json())).correctness
    assert again == spec
    doc = json.loads(job.to_json())
    doc["correctness"]["critical"] = doc["correctness"]["critical"][:1]
    with pytest.raises(ValueError, match="one critical value each"):
        parse_job(doc)


def test_comment_shows_both_sides_with_intervals_seed_and_path() -> None:
    from evalbot.grading.grade import grade
    from evalbot.report.render import render_comment

    results = {"schema": "evalbot.results/1", "job_id": "j", "profile": "demo", "box": {},
               "base": {"sha": "a" * 40, "ok": True}, "head": {"sha": "b" * 40, "ok": True},
               "rule": {"looks": [2], "critical": [1.0], "sd_floor": 0.1, "significance": 0.1,
                        "tolerance": 0.1, "alpha": 0.01}, "models": [{"name": "tiny", "role": "primary"}],
               "cells": [], "failures": [],
               "correctness": section(chunks(32, 256, 0.93, 2, 28),
                                      consistency=_consistency([0.0] * 8, [0.0] * 8))}
    policy = load_labels(REPO_ROOT / "labels.yaml").policy("default")
    verdict = grade(results, policy)
    assert verdict["kind"] == "incorrect"
    text = render_comment(verdict)
    corr = verdict["correctness"]
    from evalbot.report.numbers import wilson
    for side in ("base", "head"):  # proportions with Wilson intervals; KL with its own
        top1, kl = corr[side]["top1"], corr[side]["kl"]
        lo, hi = wilson(top1["mean"], top1["lo"], top1["hi"], corr["tokens"])
        assert f"{top1['mean']:.3f} [{lo:.3f}, {hi:.3f}]" in text
        assert f"{kl['mean']:.3g} [{max(0.0, kl['lo']):.3g}, {kl['hi']:.3g}]" in text
    assert "seed `5`" in text and "scored: score path" in text
    assert "Speed/score consistency: consistent (0 of 16 greedy tokens differ)" in text


def _graded(correctness: dict[str, Any]) -> dict[str, Any]:
    from evalbot.grading.grade import grade

    results = {"schema": "evalbot.results/1", "job_id": "j", "profile": "demo", "box": {},
               "base": {"sha": "a" * 40, "ok": True}, "head": {"sha": "b" * 40, "ok": True},
               "rule": {"looks": [2], "critical": [1.0], "sd_floor": 0.1, "significance": 0.1,
                        "tolerance": 0.1}, "models": [{"name": "tiny", "role": "primary"}],
               "cells": [], "failures": [], "correctness": correctness}
    return grade(results, load_labels(REPO_ROOT / "labels.yaml").policy("default"))


@pytest.mark.parametrize(("recorded", "kind"), [
    (chunks(112, 256, 0.93, 10, 13, spread=4), "inconclusive"),  # at the margin, cap reached
    (chunks(32, 256, 0.80, 3, 3, spread=1), "infra-error"),  # main below the floor
    (chunks(32, 256, 0.93, 3, 3, spread=1), "neutral"),
])
def test_every_correctness_outcome_reaches_the_headline(recorded: list[dict[str, Any]],
                                                        kind: str) -> None:
    verdict = _graded(section(recorded))
    assert verdict["kind"] == kind
    assert verdict["headline"] == {"inconclusive": "eval:inconclusive",
                                   "infra-error": "eval:infra-error",
                                   "neutral": "eval:none"}[kind]
    if kind != "neutral":
        assert verdict["reasons"] == verdict["correctness"]["reasons"]
