"""Main's drift against the correctness floors: the bot's rule and its replay (issue 46).

Main below a floor means the reference (or main) is unusable for judging anyone: the evaluation's
correctness is an infra-error that names it, never a pass. From the sequential rule on, the
harness tests main at every look and scores the next look's windows while the test is undecided
(engine/contract/shared/drift.py), whatever the head's verdict: a main a few points under its floor, which
one look of 28 windows tells in fewer than half the PRs, is scored until it is told. Results
before it carry no `drift` rule and are judged once, on every chunk scored (`legacy`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalbot.config.errors import ResultsError
from evalbot.engine.contract.shared import drift
from evalbot.grading import quantiles
from evalbot.grading.policy import CorrectnessPolicy

DIGITS = 6
# One-sided level of main's drift test. Against calibrated floors (which already sit below
# main's own noise: calibrate_floors takes main's lowest bound) 5%: a main at its calibrated
# level is flagged far less often than that. Against the policy's uncalibrated defaults 0.5%:
# main's noise is not in them.
DRIFT_ALPHA, DRIFT_ALPHA_UNCALIBRATED = 0.05, 0.005
# The drift the test must catch (main 3 points of top-1 under its floor, 0.05 nat of KL over its
# ceiling) and the level at which main is cleared of it, per look; a main neither drifted nor
# cleared is scored on to the next look.
DRIFT_TOP1_MARGIN, DRIFT_KL_MARGIN, DRIFT_CLEAR_ALPHA = 0.03, 0.05, 0.005


def rule(looks: Sequence[int], floors: dict[str, float], policy: CorrectnessPolicy) -> dict[str, Any]:
    """The drift test per look of `looks` windows: the floors (the calibrated ones, else the
    policy's), one-sided t quantiles with windows - 1 degrees of freedom."""
    alpha = DRIFT_ALPHA if floors else DRIFT_ALPHA_UNCALIBRATED
    return {"top1": floors.get("top1", policy.top1_floor),
            "kl": floors.get("kl", policy.kl_ceiling), "alpha": alpha,
            "critical": [_t(alpha, k) for k in looks],
            "clear": [_t(DRIFT_CLEAR_ALPHA, k) for k in looks],
            "top1_margin": DRIFT_TOP1_MARGIN, "kl_margin": DRIFT_KL_MARGIN}


def replay(section: dict[str, Any], counts: Sequence[int]) -> tuple[int, str]:
    """(the look that told, its status) of the recorded section's drift test, replayed on its
    chunks (`counts`: chunks per look); the recorded statuses must be the replay's."""
    recorded, chunks = section["rule"]["drift"], section["chunks"]
    statuses = []
    for j, count in enumerate(counts):
        if count > len(chunks):
            break
        statuses.append(drift.status(chunks[:count], recorded, j))
        if statuses[-1] != "undecided":
            break
    if [d.get("status") for d in section.get("drift_looks") or []] != statuses:
        raise ResultsError(f"correctness: recorded drift looks "
                           f"{[d.get('status') for d in section.get('drift_looks') or []]} "
                           f"disagree with the replay {statuses}")
    if statuses[-1] == "undecided":
        raise ResultsError("correctness: scoring stopped while main's drift was undecided")
    return len(statuses) - 1, statuses[-1]


def check_rule(recorded: dict[str, Any], looks: Sequence[int]) -> None:
    """The recorded drift rule must carry the bot's quantiles and margins for the section's looks
    at one of its two levels (its floors are the job's: the profile's calibrated ones or the
    job's policy's)."""
    calibrated = recorded.get("alpha") == DRIFT_ALPHA
    if not calibrated and recorded.get("alpha") != DRIFT_ALPHA_UNCALIBRATED:
        raise ResultsError(f"correctness: drift alpha {recorded.get('alpha')!r} is neither "
                           f"{DRIFT_ALPHA} nor {DRIFT_ALPHA_UNCALIBRATED}")
    want = {k: v for k, v in rule(looks, {"top1": 0.0} if calibrated else {}, _ANY).items()
            if k not in ("top1", "kl", "alpha")}
    for key, value in want.items():
        got = recorded.get(key)
        values, gots = (value, got) if isinstance(value, list) else ([value], [got])
        if not isinstance(gots, list) or len(gots) != len(values) or any(
                g is None or abs(float(g) - v) > 1e-6 for g, v in zip(gots, values, strict=True)):
            raise ResultsError(f"correctness: recorded drift rule {key} {got!r} is not the "
                               f"bot's ({value!r})")


def legacy(chunks: Sequence[dict[str, Any]], calibrated: bool) -> dict[str, Any]:
    """Results before the sequential drift test: main over every chunk scored, one-sided."""
    alpha = DRIFT_ALPHA if calibrated else DRIFT_ALPHA_UNCALIBRATED
    windows = drift.main_level(chunks, 0.0)["windows"]
    return drift.main_level(chunks, _t(alpha, windows))


_ANY = CorrectnessPolicy(margin=0.0, kl_margin=0.0, top1_floor=0.0, kl_ceiling=0.0)


def _t(alpha: float, windows: int) -> float:
    return round(float(quantiles.t_isf(alpha, max(windows - 1, 1))), DIGITS)
