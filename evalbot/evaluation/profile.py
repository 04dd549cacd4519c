"""Engine profiles: how to build and drive one engine, validated on load (design section 3)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evalbot.config.errors import ConfigError
from evalbot.config.yamlfile import Doc, Section
from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.job import (
    LONG_SCORED,
    METRICS,
    PARSE_KINDS,
    PLACEHOLDERS,
    TOKENIZE_PLACEHOLDERS,
)
from evalbot.engine.contract.sandbox_spec import check_limits
from evalbot.engine.contract.witness_spec import PROMPT_PLACEHOLDERS, WitnessSpec, parse_witness

PROFILES_DIR = Path(__file__).parent.parent / "profiles"


@dataclass(frozen=True)
class ProfileModel:
    name: str
    file: str  # relative to the box's models_dir, or absolute
    sha256: str
    role: str  # primary | guard
    namespace: str  # label namespace, e.g. eval-qwen35


@dataclass(frozen=True)
class ProfileCell:
    metric: str
    ctx: int
    anchor: float = 0.0  # llama.cpp's tok/s for this (model, metric, ctx); sparkinfer-compat
    sd_floor: float = 0.0  # the cell's measured sd of the per-pair log-ratio; 0: speed.sd_floor


@dataclass(frozen=True)
class ProfileRun:
    model: str
    argv: tuple[str, ...]
    parse: dict[str, Any]
    cells: tuple[ProfileCell, ...]
    decode_tokens: int
    timeout_s: float
    # harness-timed witness workloads (engine/measure/witness.py); cells keyed by the full cell key
    witnesses: tuple[WitnessSpec, ...] = ()
    # the calibrated sd (seconds) of a pair's time unaccounted for by the printed rates, and its
    # degrees of freedom (evalbot/grading/unexplained_cost.py); 0: the pairs' own sd only
    cost_floor_s: float = 0.0
    cost_floor_df: int = 0


@dataclass(frozen=True)
class SpeedSettings:
    looks: tuple[int, ...]
    warmup: int
    sd_floor: float
    budget_s: float
    significance: float | None  # overrides of the policy's s and t, from calibration
    tolerance: float | None
    sd_floor_df: int = 0  # degrees of freedom of the floors' measurement; 0: the first rule
    witness_share: float = 0.25  # the witnesses' box time at most, as a share of the measuring's
    # the witnesses time every covered cell not regressed, not only the improved (issue 53)
    witness_every_cell: bool = False
    # the budget counted in pairs (StoppingRule.total_budget_s): main's sample pace budget_s was
    # sized at, and the cap of the scaled budget; both None: budget_s whatever the pace
    budget_pace_s: float | None = None
    max_budget_s: float | None = None
    # the slowdown share a witness must rule out for a cell printed unchanged to be believed
    # (`witness_every_cell`); None: the rule's tolerance (evalbot/evaluation/jobspec.py)
    witness_margin: float | None = None


@dataclass(frozen=True)
class CorrectnessSettings:
    model: str
    score_argv: tuple[str, ...]
    reference_argv: tuple[str, ...]
    windows: int
    window_tokens: int
    topk: int
    timeout_s: float
    looks: tuple[int, ...] = ()  # growth: cumulative windows per look (long ones included)
    long_windows: int = 0  # windows of long_window_tokens, for models scored at long context
    long_window_tokens: int = 0
    floors: dict[str, float] | None = None  # calibrated from main: {top1, kl}
    tie_nats: float = 0.01  # speed/score consistency tolerance (docs/correctness.md)
    max_mismatch: float = 0.02
    path: str = ""  # the numeric path the score command runs, when not the benchmarked one
    tokenize_argv: tuple[str, ...] = ()  # the model's tokenizer (docs/profiles.md); (): bytes
    guards: tuple[str, ...] = ()  # more models scored with this recipe, each deciding as well
    long_score_tokens: int = 0  # positions scored at the end of each long window; 0: all
    long_scored: str = "all"  # "deep": only those positions (engine/contract/job.py)


@dataclass(frozen=True)
class Profile:
    name: str
    build_argv: tuple[str, ...]
    build_timeout_s: float
    artifacts: tuple[str, ...]
    env: dict[str, str]
    models: tuple[ProfileModel, ...]
    runs: tuple[ProfileRun, ...]
    speed: SpeedSettings
    correctness: CorrectnessSettings | None
    box_labels: tuple[str, ...] = ()  # a box must carry all of these to run this profile
    gpu: bool = True  # the engine needs an NVIDIA GPU (`evalbot doctor` fails a box without one)
    version: int = 1  # bumped when what it measures changes; recorded with every verdict
    # per stage (build, run): what one process of a side may use of the box (engine/sandbox/
    # caps.py): memory_mb, tmpfs_mb, disk_mb; past it, the head's failure, main's infra's
    limits: dict[str, dict[str, int]] = field(default_factory=dict)

    def model(self, name: str) -> ProfileModel:
        return next(m for m in self.models if m.name == name)

    @property
    def cell_count(self) -> int:
        return sum(len(r.cells) for r in self.runs)


def load_profile(name_or_path: str) -> Profile:
    """A shipped profile by name (evalbot/profiles/NAME.yaml) or a path to a YAML file."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILES_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            shipped = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))
            raise ConfigError(f"unknown profile {name_or_path!r} (shipped: {shipped})")
    doc = Doc(path)
    top = Section(doc, "", doc.data, {"name", "version", "build", "env", "models", "speed",
                                      "correctness", "box_labels", "gpu", "limits"})
    build = top.section("build", {"argv", "timeout_s", "artifacts"})
    models = tuple(_model(s) for s in top.items("models", {"name", "file", "sha256", "role",
                                                           "namespace"}))
    names = {m.name for m in models}
    speed = top.section("speed", {"runs", "looks", "warmup", "sd_floor", "budget_s",
                                  "significance", "tolerance", "sd_floor_df", "witness_share",
                                  "witness_every_cell", "witness_margin",
                                  "budget_pace_s", "max_budget_s"})
    runs = tuple(_run(s, names) for s in speed.items("runs", {"model", "argv", "parse", "cells",
                                                               "decode_tokens", "timeout_s",
                                                               "cost_floor",
                                                               "witnesses"}))
    witnesses = [w.name for r in runs for w in r.witnesses]
    if len(set(witnesses)) < len(witnesses):  # a witness's name is its key in the results
        twice = sorted({n for n in witnesses if witnesses.count(n) > 1})
        raise doc.error(speed.path("runs"), f"witness name(s) used twice: {', '.join(twice)}")
    budget_s = speed.get("budget_s", float, 1800.0)
    budget_pace_s, max_budget_s = _budget_in_pairs(speed, budget_s)
    looks = tuple(speed.get("looks", list))
    if not looks or looks != tuple(sorted(set(looks))) or looks[0] < 2:
        raise doc.error(speed.path("looks"), "must be increasing pair counts, the first >= 2")
    return Profile(
        name=top.get("name", str),
        build_argv=_argv(build, "argv"),
        build_timeout_s=build.get("timeout_s", float, 1800.0),
        artifacts=tuple(build.get("artifacts", list)),
        env={str(k): str(v) for k, v in top.get("env", dict, {}).items()},
        models=models,
        runs=runs,
        speed=SpeedSettings(
            looks=looks,
            warmup=speed.get("warmup", int, 1),
            sd_floor=speed.get("sd_floor", float),
            budget_s=budget_s,
            significance=speed.get("significance", float, None),
            tolerance=speed.get("tolerance", float, None),
            sd_floor_df=_floor_df(speed),
            witness_share=_witness_share(speed),
            witness_every_cell=speed.get("witness_every_cell", bool, False),
            budget_pace_s=budget_pace_s,
            max_budget_s=max_budget_s,
            witness_margin=_witness_margin(speed),
        ),
        correctness=_correctness(top, names) if "correctness" in doc.data else None,
        box_labels=tuple(str(x) for x in top.get("box_labels", list, [])),
        gpu=top.get("gpu", bool, True),
        version=_version(top),
        limits=_limits(top),
    )


def _limits(top: Section) -> dict[str, dict[str, int]]:
    try:
        return check_limits(top.get("limits", dict, {}), "limits")
    except ContractError as exc:
        where, _, message = str(exc).partition(": ")  # the key it names, then what is wrong
        raise top.doc.error(where, message) from exc


def _argv(s: Section, key: str) -> tuple[str, ...]:
    argv = s.get(key, list)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise s.doc.error(s.path(key), "must be a non-empty list of strings (no shell)")
    import string

    for arg in argv:
        for _, name, _, _ in string.Formatter().parse(arg):
            if name and name not in PLACEHOLDERS:
                raise s.doc.error(s.path(key), f"unknown placeholder {{{name}}} in {arg!r}")
    return tuple(argv)


def _model(s: Section) -> ProfileModel:
    role = s.get("role", str, "primary")
    if role not in ("primary", "guard"):
        raise s.doc.error(s.path("role"), f"{role!r} is not one of primary, guard")
    digest = s.get("sha256", str)
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise s.doc.error(s.path("sha256"), "must be 64 lowercase hex digits")
    return ProfileModel(s.get("name", str), s.get("file", str), digest, role,
                        s.get("namespace", str))


def _run(s: Section, models: set[str]) -> ProfileRun:
    model = s.get("model", str)
    if model not in models:
        raise s.doc.error(s.path("model"), f"{model!r} is not a model of this profile")
    parse = s.get("parse", dict)
    if parse.get("kind") not in PARSE_KINDS:
        raise s.doc.error(s.path("parse"), f"kind must be one of {', '.join(PARSE_KINDS)}")
    cells = []
    for c in s.items("cells", {"metric", "ctx", "anchor", "sd_floor"}):
        metric = c.get("metric", str)
        if metric not in METRICS:
            raise c.doc.error(c.path("metric"), f"{metric!r} is not one of {', '.join(METRICS)}")
        anchor = c.get("anchor", float, 0.0)
        if anchor < 0:
            raise c.doc.error(c.path("anchor"), f"{anchor} is not a rate >= 0")
        floor = c.get("sd_floor", float, 0.0)
        if not 0 <= floor < 1:
            raise c.doc.error(c.path("sd_floor"), f"{floor} is not an sd between 0 and 1")
        cells.append(ProfileCell(metric, c.get("ctx", int), anchor, floor))
    cost = s.section("cost_floor", {"sd_s", "df"})
    sd_s, df = cost.get("sd_s", float, 0.0), cost.get("df", int, 0)
    if sd_s < 0 or df < 0 or (sd_s > 0) != (df > 0):
        raise s.doc.error(s.path("cost_floor"), f"sd_s {sd_s} with {df} df: a floor is an sd "
                          "> 0 with its degrees of freedom > 0")
    return ProfileRun(model, _argv(s, "argv"), parse, tuple(cells),
                      s.get("decode_tokens", int, 128), s.get("timeout_s", float, 600.0),
                      _witnesses(s, model, cells), sd_s, df)


def _witnesses(s: Section, model: str, cells: list[ProfileCell]) -> tuple[WitnessSpec, ...]:
    """A witness names its cells as `metric@ctx` of this run; the job uses full cell keys."""
    import string

    out = []
    keys = {f"{c.metric}@{c.ctx}" for c in cells}
    for i, w in enumerate(s.get("witnesses", list, [])):
        where = s.path("witnesses") + f"[{i}]"
        try:
            spec = parse_witness(w, where, keys)
        except ContractError as exc:
            raise s.doc.error(where, str(exc)) from exc
        for arg in spec.argv:
            for _, name, _, _ in string.Formatter().parse(arg):
                if name and name not in PLACEHOLDERS + PROMPT_PLACEHOLDERS:
                    raise s.doc.error(where, f"unknown placeholder {{{name}}} in {arg!r}")
        out.append(replace(spec, cells={f"{model}/{k}": v for k, v in spec.cells.items()}))
    return tuple(out)


def _floor_df(speed: Section) -> int:
    """The floors are a measurement: a zero floor says nothing, its df say how much it weighs."""
    floor = speed.get("sd_floor", float)
    if not 0 < floor < 1:
        raise speed.doc.error(speed.path("sd_floor"), f"{floor} is not an sd between 0 and 1")
    df: int = speed.get("sd_floor_df", int, 0)
    if df < 0:
        raise speed.doc.error(speed.path("sd_floor_df"), f"{df} degrees of freedom")
    return df


def _version(top: Section) -> int:
    version: int = top.get("version", int, 1)
    if version < 1:
        raise top.doc.error(top.path("version"), f"{version}: a profile's version counts from 1")
    return version


def _witness_share(speed: Section) -> float:
    """The witnesses' box time is bounded by the measuring's: above 0 (a witness must be able to
    run), at most 10 times it (a typo, not a policy)."""
    share: float = speed.get("witness_share", float, 0.25)
    if not 0 < share <= 10:
        raise speed.doc.error(speed.path("witness_share"),
                              f"{share} is not a share of the measuring's box time in (0, 10]")
    return share


def _witness_margin(speed: Section) -> float | None:
    """A share of a cell's work in (0, 1), at most the profile's own tolerance where it sets one
    (the policy's is checked where the two meet: jobspec.witness_margin)."""
    margin = speed.get("witness_margin", float, None)
    tolerance = speed.get("tolerance", float, None)
    bound = 1.0 if tolerance is None else tolerance
    if margin is not None and not 0 < margin <= bound:
        raise speed.doc.error(speed.path("witness_margin"), f"{margin} is not a share of a "
                              f"cell's work in (0, {bound:g}]"
                              + (" (the profile's tolerance)" if tolerance is not None else ""))
    return margin


def _budget_in_pairs(speed: Section, budget_s: float) -> tuple[float | None, float | None]:
    """budget_pace_s and max_budget_s come together (a pace without a cap would let a slow box
    run for ever; a cap without a pace scales nothing): positive, the cap at least budget_s."""
    pace = speed.get("budget_pace_s", float, None)
    cap = speed.get("max_budget_s", float, None)
    if (pace is None) != (cap is None):
        given, missing = ("budget_pace_s", "max_budget_s") if cap is None else \
            ("max_budget_s", "budget_pace_s")
        raise speed.doc.error(speed.path(given), f"needs {missing} too (both or neither)")
    if pace is not None and not pace > 0:
        raise speed.doc.error(speed.path("budget_pace_s"),
                              f"{pace} is not a sample process's time in seconds (> 0)")
    if cap is not None and not (cap > 0 and cap >= budget_s):
        raise speed.doc.error(speed.path("max_budget_s"),
                              f"{cap} is not a cap in seconds at least budget_s ({budget_s:g}): "
                              "the scaled budget is never below budget_s")
    return pace, cap


def _correctness(top: Section, models: set[str]) -> CorrectnessSettings:
    s = top.section("correctness", {"model", "score_argv", "reference_argv", "windows",
                                    "window_tokens", "topk", "timeout_s", "looks",
                                    "long_windows", "long_window_tokens", "floors", "tie_nats",
                                    "max_mismatch", "path", "tokenize_argv", "guards",
                                    "long_score_tokens", "long_scored"})
    model = s.get("model", str)
    if model not in models:
        raise s.doc.error(s.path("model"), f"{model!r} is not a model of this profile")
    looks = tuple(s.get("looks", list, []))
    if looks != tuple(sorted(set(looks))) or not all(isinstance(k, int) for k in looks):
        raise s.doc.error(s.path("looks"), "must be increasing window counts")
    floors = {str(k): float(v) for k, v in s.get("floors", dict, {}).items()}
    if set(floors) - {"top1", "kl"}:
        raise s.doc.error(s.path("floors"), "only the keys top1 and kl")
    guards = tuple(str(g) for g in s.get("guards", list, []))
    if set(guards) - (models - {model}) or len(set(guards)) != len(guards):
        raise s.doc.error(s.path("guards"), f"must name other models of this profile, once "
                          f"each (the scored model is {model!r})")
    return CorrectnessSettings(model, _argv(s, "score_argv"), _argv(s, "reference_argv"),
                               s.get("windows", int), s.get("window_tokens", int),
                               s.get("topk", int, 8), s.get("timeout_s", float, 600.0),
                               looks, s.get("long_windows", int, 0),
                               s.get("long_window_tokens", int, 0), floors or None,
                               s.get("tie_nats", float, 0.01), s.get("max_mismatch", float, 0.02),
                               s.get("path", str, ""), _tokenize_argv(s), guards,
                               s.get("long_score_tokens", int, 0), _long_scored(s))


def _long_scored(s: Section) -> str:
    """"deep": a long window's positions before its last long_score_tokens are filled by the
    score command and not scored (docs/correctness.md)."""
    value = s.get("long_scored", str, "all")
    deep_less = s.get("long_windows", int, 0) and s.get("long_score_tokens", int, 0) < 1
    if value not in LONG_SCORED or (value == "deep" and deep_less):
        raise s.doc.error(s.path("long_scored"), f"{value!r}: one of {list(LONG_SCORED)}; "
                          "'deep' needs long_score_tokens >= 1 (with long windows)")
    return value


def _tokenize_argv(s: Section) -> tuple[str, ...]:
    """Optional; it gets only what a tokenizer needs and must read {text} and write {out}."""
    if s.get("tokenize_argv", list, None) is None:
        return ()
    argv = _argv(s, "tokenize_argv")
    import string

    used = {name for arg in argv for _, name, _, _ in string.Formatter().parse(arg) if name}
    foreign = sorted(used - set(TOKENIZE_PLACEHOLDERS))
    if foreign:
        raise s.doc.error(s.path("tokenize_argv"), f"placeholders {foreign} are not a "
                          f"tokenizer's (allowed: {', '.join(TOKENIZE_PLACEHOLDERS)})")
    if not {"text", "out"} <= used:
        raise s.doc.error(s.path("tokenize_argv"), "must read {text} and write {out}")
    return argv
