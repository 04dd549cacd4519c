"""The job's stopping rule: the per-look values the bot computed, as the harness receives them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .checks import ContractError
from .checks import field as get


@dataclass(frozen=True)
class StoppingRule:
    """Per-look critical values computed by the bot; the harness only applies them."""

    looks: list[int]  # cumulative pair counts at which the rule looks
    critical: list[float]  # one per look, already corrected for the family and the looks
    sd_floor: float  # minimum sd of the per-pair log-ratio (the box's calibrated noise)
    significance: float  # s: smallest speedup that counts as an improvement
    tolerance: float  # t: largest slowdown that still counts as neutral
    warmup: int = 1
    budget_s: float = 1800.0
    budget_pace_s: float | None = None  # main's sample pace budget_s buys its pairs at (total_budget_s)
    max_budget_s: float | None = None  # the cap of budget_s scaled by main's pace; None: unscaled
    alpha: float = 0.05  # recorded so the grader can recompute `critical` and check it
    # The rest of the schedule (engine/contract/shared/stats.py): one value per look; empty means `critical`
    # (the first rule, where one critical value served every test).
    critical_floor: list[float] = field(default_factory=list)  # x floor: normal (rule 1), t (pooled)
    equivalence: list[float] = field(default_factory=list)  # per-cell TOST t quantile
    equivalence_floor: list[float] = field(default_factory=list)
    equivalence_alpha: float = 0.05
    family: int = 0  # cells the alpha was split over (0: every cell of the job)
    sd_floors: dict[str, float] = field(default_factory=dict)  # cell key -> calibrated sd
    lock_clocks: bool = False  # the box's config allows locking the GPU clocks
    # The pooled rule (engine/contract/shared/stats.py): the calibration's degrees of freedom (0: the first,
    # max(t S, z f) rule), the tier interval's quantiles, the F guard, each one per look.
    pool_df: int = 0
    # 1: the rule before issue 33; 2: negative per-look values select its tests (too few pairs
    # for a verdict, the tier settled on its own width; evalbot/grading/sequential.py)
    rule_version: int = 1
    settle: list[float] = field(default_factory=list)
    settle_floor: list[float] = field(default_factory=list)
    guard: list[float] = field(default_factory=list)
    # cell key -> the policy's tier thresholds in log-ratio space, ascending: an improved cell
    # keeps measuring until its tier is settled (empty: no tier test)
    tier_edges: dict[str, list[float]] = field(default_factory=dict)
    calibrated: list[str] = field(default_factory=list)  # cells whose floor is the box's A/A
    # the most box time the witnesses may take, as a share of the measuring's (engine/measure/
    # witness.py `fits`): a witness that would go past it stops, its claim unconfirmed
    witness_share: float = 0.25
    # rule version 3: a pair with a sample slower than its side's fastest by more than this many
    # spreads is dropped and measured again (engine/contract/shared/faults.py); 0: no screen
    fault_sigmas: float = 0.0
    # an A/A calibration (evalbot calibrate --witnesses): every witness runs all its pairs,
    # whatever the cells' decisions and the share, so the box's per-pair sd of each is measured
    witness_aa: bool = False
    # the witnesses also time the covered cells that are not improved, and the bot judges them
    # both ways (issue 53: a slowdown printed away is not "unchanged"; docs/trust.md)
    witness_every_cell: bool = False
    # the policy REJECTs any regressed cell: once one is measured regressed no witness can change
    # the verdict, and none runs (engine/measure/speed.py); False in jobs before this field
    regression_rejects: bool = False
    # the slowdown, as a share of a cell's work, a witness must rule out for a cell printed
    # unchanged to be believed (`witness_every_cell`): the profile's `witness_margin` (sparkinfer:
    # the policy's smallest tier step), at most `tolerance`; 0 in jobs before it: the tolerance
    witness_margin: float = 0.0

    @property
    def margin(self) -> float:
        """The slowdown share the witnesses rule out (`witness_margin`, else the tolerance)."""
        return self.witness_margin or self.tolerance

    def total_budget_s(self, main_pace_s: float | None) -> float:
        """The measuring's box-time budget, counted in pairs (seconds from its start):
        budget_s buys its pairs at main's sample pace `budget_pace_s`, and a slower box gets the
        same pairs, budget_s x max(1, main pace / budget_pace_s), up to max_budget_s and never
        below budget_s. Only main's pace counts: the PR cannot set it (a slower head only makes
        its own pairs longer). A rule without the two keys, or no pace measured: budget_s.
        engine/measure/speed.py applies it once, after the first run's warm-up."""
        if self.budget_pace_s is None or self.max_budget_s is None or not main_pace_s:
            return self.budget_s
        scaled = self.budget_s * max(1.0, main_pace_s / self.budget_pace_s)
        return max(self.budget_s, min(self.max_budget_s, scaled))


def _share(d: Any) -> float:
    share = get(d, "rule", "witness_share", float, optional=True)
    if share is not None and not 0 < share <= 10:
        raise ContractError("rule.witness_share: a share of the measuring's box time, in (0, 10]")
    return StoppingRule.witness_share if share is None else share


def parse_rule(d: Any) -> StoppingRule:
    w = "rule"
    looks = [int(x) for x in get(d, w, "looks", list)]
    critical = [float(x) for x in get(d, w, "critical", list)]
    if not looks or len(looks) != len(critical) or looks != sorted(set(looks)) or looks[0] < 2:
        raise ContractError("rule: looks must be increasing pair counts >= 2, one critical each")
    return StoppingRule(
        looks=looks,
        critical=critical,
        sd_floor=get(d, w, "sd_floor", float),
        significance=get(d, w, "significance", float),
        tolerance=get(d, w, "tolerance", float),
        warmup=get(d, w, "warmup", int, optional=True) or 0,
        budget_s=get(d, w, "budget_s", float, optional=True) or 1800.0,
        budget_pace_s=get(d, w, "budget_pace_s", float, optional=True),
        max_budget_s=get(d, w, "max_budget_s", float, optional=True),
        alpha=get(d, w, "alpha", float, optional=True) or 0.05,
        critical_floor=_per_look(d, "critical_floor", len(looks)),
        equivalence=_per_look(d, "equivalence", len(looks)),
        equivalence_floor=_per_look(d, "equivalence_floor", len(looks)),
        equivalence_alpha=get(d, w, "equivalence_alpha", float, optional=True) or 0.05,
        family=get(d, w, "family", int, optional=True) or 0,
        sd_floors={str(k): float(v) for k, v in (d.get("sd_floors") or {}).items()},
        lock_clocks=bool(d.get("lock_clocks", False)),
        pool_df=get(d, w, "pool_df", int, optional=True) or 0,
        rule_version=get(d, w, "rule_version", int, optional=True) or 1,
        settle=_per_look(d, "settle", len(looks)),
        settle_floor=_per_look(d, "settle_floor", len(looks)),
        guard=_per_look(d, "guard", len(looks)),
        tier_edges={str(k): [float(x) for x in v] for k, v in (d.get("tier_edges") or {}).items()},
        calibrated=[str(k) for k in d.get("calibrated") or []],
        witness_share=_share(d),
        witness_aa=get(d, w, "witness_aa", bool, optional=True) or False,
        witness_every_cell=get(d, w, "witness_every_cell", bool, optional=True) or False,
        regression_rejects=get(d, w, "regression_rejects", bool, optional=True) or False,
        fault_sigmas=_fault_sigmas(d),
        witness_margin=_witness_margin(d),
    )


def _witness_margin(d: Any) -> float:
    margin = get(d, "rule", "witness_margin", float, optional=True) or 0.0
    tolerance = get(d, "rule", "tolerance", float)
    if not 0 <= margin <= tolerance:
        raise ContractError(f"rule.witness_margin: {margin} is not a share of a cell's work in "
                            f"[0, the tolerance {tolerance}]")
    return margin


def _fault_sigmas(d: Any) -> float:
    sigmas = get(d, "rule", "fault_sigmas", float, optional=True)
    if sigmas is not None and not 0 <= sigmas <= 100:
        raise ContractError("rule.fault_sigmas: spreads of the fault screen, in [0, 100]")
    return sigmas or 0.0


def _per_look(d: Any, key: str, looks: int) -> list[float]:
    values = [float(x) for x in d.get(key) or []]
    if values and len(values) != looks:
        raise ContractError(f"rule.{key}: {len(values)} values for {looks} looks")
    return values
