"""labels.yaml: the label set and the grading policies, loaded into typed objects."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evalbot.config.yamlfile import Doc, Section

TIER_ORDER = ("XL", "L", "M", "S", "XS")


@dataclass(frozen=True)
class Label:
    name: str
    color: str
    description: str


@dataclass(frozen=True)
class CorrectnessPolicy:
    margin: float
    kl_margin: float
    top1_floor: float
    kl_ceiling: float


@dataclass(frozen=True)
class Policy:
    name: str
    version: int
    alpha: float
    significance: float
    tolerance: float
    tiers: dict[str, float]  # tier -> minimum gain, XL first
    tier_by: str  # lower_bound | estimate | compat
    regression_rejects: bool
    correctness: CorrectnessPolicy
    difficulty_k: float = 8.0
    difficulty_max: float = 1.5
    difficulty_boost: bool = False

    @property
    def ident(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def smallest_tier_step(self) -> float:
        """The least gain between two adjacent tiers (XS 2% to S 3.5%: 1.5%), the finest
        slowdown a tier can hinge on; a profile's `speed.witness_margin` is set to it."""
        gains = sorted(self.tiers.values())
        return round(min(b - a for a, b in zip(gains, gains[1:], strict=False)), 9)


@dataclass(frozen=True)
class LabelBook:
    labels: tuple[Label, ...]
    model_tiers: tuple[str, ...]
    model_color: str
    context_color: str
    regression_color: str
    policies: dict[str, Policy]

    def policy(self, name: str, where: str = "labels.yaml") -> Policy:
        from evalbot.config.errors import ConfigError

        if name not in self.policies:
            raise ConfigError(f"{where}: no policy {name!r} (have: {', '.join(self.policies)})")
        return self.policies[name]

    def names(self) -> set[str]:
        return {label.name for label in self.labels}


_POLICY_KEYS = {"version", "description", "speed", "tiers", "tier_by", "regression_rejects",
                "correctness", "difficulty"}


def load_labels(path: Path) -> LabelBook:
    doc = Doc(path)
    top = Section(doc, "", doc.data, {"version", "labels", "model_label_tiers", "model_label_color",
                                      "context_label_color", "regression_label_color", "policies"})
    labels = tuple(
        Label(s.get("name", str), str(s.get("color", (str, int))), s.get("description", str))
        for s in top.items("labels", {"name", "color", "description"})
    )
    policies_section = top.get("policies", dict)
    policies = {
        name: _policy(Section(doc, f"policies.{name}", value, _POLICY_KEYS), name)
        for name, value in policies_section.items()
    }
    return LabelBook(labels, tuple(top.get("model_label_tiers", list)),
                     str(top.get("model_label_color", str)), str(top.get("context_label_color", str)),
                     str(top.get("regression_label_color", str)), policies)


def _fraction(s: Section, key: str) -> float:
    value: float = s.get(key, float)
    if not 0 < value < 1:
        raise s.doc.error(s.path(key), f"{value} is not a fraction between 0 and 1")
    return value


def _policy(s: Section, name: str) -> Policy:
    speed = s.section("speed", {"alpha", "significance", "tolerance"})
    corr = s.section("correctness", {"margin", "kl_margin", "top1_floor", "kl_ceiling"})
    tiers = s.get("tiers", dict)
    if list(tiers) != list(TIER_ORDER) or list(tiers.values()) != sorted(tiers.values(), reverse=True):
        raise s.doc.error(s.path("tiers"), f"must list {', '.join(TIER_ORDER)} with falling thresholds")
    tier_by = s.get("tier_by", str)
    if tier_by not in ("lower_bound", "estimate", "compat"):
        raise s.doc.error(s.path("tier_by"), f"{tier_by!r} is not lower_bound, estimate or compat")
    difficulty = s.section("difficulty", {"boost", "k", "max"})
    return Policy(
        name=name,
        version=s.get("version", int),
        alpha=_fraction(speed, "alpha"),
        significance=_fraction(speed, "significance"),
        tolerance=_fraction(speed, "tolerance"),
        tiers={k: float(v) for k, v in tiers.items()},
        tier_by=tier_by,
        regression_rejects=s.get("regression_rejects", bool, True),
        correctness=CorrectnessPolicy(_fraction(corr, "margin"), _fraction(corr, "kl_margin"),
                                      _fraction(corr, "top1_floor"), corr.get("kl_ceiling", float)),
        difficulty_boost=difficulty.get("boost", bool, False),
        difficulty_k=difficulty.get("k", float, 8.0),
        difficulty_max=difficulty.get("max", float, 1.5),
    )
