"""The job description: what the bot asks the harness to do (bot -> box, JSON, versioned)."""

from __future__ import annotations

import json
import string
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import sandbox_spec
from .checks import ContractError, one_of, sha
from .checks import field as get
from .rule import StoppingRule, parse_rule
from .witness_spec import PROMPT_PLACEHOLDERS, WitnessSpec, parse_witness

JOB_SCHEMA = "evalbot.job/1"
METRICS = ("decode", "prefill")
PARSE_KINDS = ("json_line", "regex", "llama_bench")
# The only names an argv template may use; everything substituted is a path or a number the
# harness controls, never text that came from the pull request.
PLACEHOLDERS = ("python", "harness", "build", "tree", "model", "ctxs", "ctx", "tokens", "out", "topk",
                "text")
# The tokenizer runs with the reference's trust (harness code or the pinned reference build, never
# the PR's build): it sees the corpus text file and the model, and writes its ids to {out}.
TOKENIZE_PLACEHOLDERS = ("python", "harness", "model", "text", "out")


@dataclass(frozen=True)
class Cell:
    """One (model, metric, context): the unit that gets a decision."""

    model: str
    metric: str
    ctx: int
    unit: str = "tok/s"
    higher_is_better: bool = True
    anchor: float = 0.0  # llama.cpp's rate for this cell (a profile constant); 0: none

    @property
    def key(self) -> str:
        return f"{self.model}/{self.metric}@{self.ctx}"


@dataclass(frozen=True)
class SpeedRun:
    """One process invocation that yields one sample for each of its cells (a sweep)."""

    model: str
    argv: list[str]
    parse: dict[str, Any]
    cells: list[Cell]
    timeout_s: float = 300.0
    tokens_per_sample: dict[str, int] = field(default_factory=dict)  # metric -> tokens
    witnesses: list[WitnessSpec] = field(default_factory=list)  # harness-timed work (witness.py)
    # the calibrated sd of a pair's time its printed rates leave unaccounted for, and its df: the
    # run's samples witness carries them to the bot (evalbot/grading/unexplained_cost.py)
    cost_floor_s: float = 0.0
    cost_floor_df: int = 0
    # per look of the rule: the bot's (t own, t pooled with that floor, F guard) at the
    # equivalence level, with which the harness measures the run on while its wall clock cannot
    # rule its unwitnessed cells in (engine/contract/shared/wall_clock.py); empty: it stops as decided
    cost_critical: list[list[float]] = field(default_factory=list)


@dataclass(frozen=True)
class Model:
    name: str
    path: str
    sha256: str
    role: str = "primary"
    namespace: str = ""


LONG_SCORED = ("all", "deep")  # Correctness.long_scored

@dataclass(frozen=True)
class Correctness:
    """What to score, and the guard's growth rule (contract/shared/correctness_stats.py) from the
    bot."""

    score_argv: list[str]
    reference_argv: list[str]
    seed: int
    windows: int  # short windows of the first look
    window_tokens: int
    topk: int = 8
    model: str = ""
    timeout_s: float = 600.0
    looks: list[int] = field(default_factory=list)  # cumulative chunks per look, long included
    critical: list[float] = field(default_factory=list)  # one t quantile per look
    alpha: float = 0.01
    margin: float = 0.01  # head may trail base by this much top-1 agreement
    kl_margin: float = 0.02  # ... and by this much mean KL
    long_windows: int = 0  # windows of long_window_tokens, for models scored at long context
    long_window_tokens: int = 0
    floors: dict[str, float] = field(default_factory=dict)  # calibrated {"top1", "kl"}
    tie_nats: float = 0.01  # speed/score consistency: a near-tie below this is no mismatch
    max_mismatch: float = 0.02  # share of decode steps allowed to mismatch beyond a tie
    path: str = ""  # the numeric path the score command runs, when not the benchmarked one
    # The scored model's tokenizer: writes the corpus text as a JSON list of ids; empty: the
    # corpus bytes are the ids (a byte vocabulary).
    tokenize_argv: list[str] = field(default_factory=list)
    # More models scored with this same recipe (windows, reference, tokenizer each their own),
    # one results section each: a profile's models guard one another's correctness too.
    guards: list[str] = field(default_factory=list)
    long_score_tokens: int = 0  # deep positions at the end of each long window (judged alone)
    # Critical value of the deep chunks' own test (engine/contract/shared/segments.py); 0: no deep test.
    deep_critical: float = 0.0
    long_scored: str = "all"  # "deep": long windows' last long_score_tokens only (segments.py)
    # main's drift against the floors, per look (engine/contract/shared/drift.py): scoring goes on while
    # it is undecided; empty: judged once, by the bot, on what the head's verdict scored
    drift: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Job:
    job_id: str
    profile: str
    repo: str  # where the box finds the engine repository (a path or URL on the box)
    base_sha: str
    head_sha: str
    build_argv: list[str]
    build_timeout_s: float
    artifacts: list[str]
    models: list[Model]
    runs: list[SpeedRun]
    rule: StoppingRule
    correctness: Correctness | None
    merge_base: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    cache_dir: str | None = None
    sandbox: dict[str, Any] | None = None  # engine.sandbox.session's settings; None: a trusted box
    limits: dict[str, dict[str, int]] = field(default_factory=dict)  # the profile's, per stage
    box: str = ""  # the box's name in the bot's config: the only box identifier ever published
    # the profile's own version: a change of what it measures (its witnesses, its looks) bumps it,
    # so a stored verdict says which one measured it (it regrades under the rule it recorded)
    profile_version: int = 1

    @property
    def cells(self) -> list[Cell]:
        return [cell for run in self.runs for cell in run.cells]

    def to_json(self) -> str:
        return json.dumps({"schema": JOB_SCHEMA, **asdict(self)}, indent=2, sort_keys=True)


def _argv(value: list[Any], where: str, extra: tuple[str, ...] = ()) -> list[str]:
    if not value or not all(isinstance(a, str) for a in value):
        raise ContractError(f"{where}: expected a non-empty list of strings")
    for arg in value:
        for name in _placeholders(arg):
            if name not in PLACEHOLDERS + extra:
                raise ContractError(f"{where}: unknown placeholder {{{name}}} in {arg!r}")
    return list(value)


def _placeholders(arg: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(arg) if name]


def _cell(d: Any, where: str) -> Cell:
    cell = Cell(
        model=get(d, where, "model", str),
        metric=one_of(get(d, where, "metric", str), METRICS, f"{where}.metric"),
        ctx=get(d, where, "ctx", int),
        unit=get(d, where, "unit", str, optional=True) or "tok/s",
        higher_is_better=bool(d.get("higher_is_better", True)),
        anchor=float(d.get("anchor") or 0.0),
    )
    if cell.ctx < 0 or cell.anchor < 0:
        raise ContractError(f"{where}: ctx and anchor must be >= 0")
    return cell


def _run(d: Any, where: str) -> SpeedRun:
    parse = get(d, where, "parse", dict)
    one_of(get(parse, f"{where}.parse", "kind", str), PARSE_KINDS, f"{where}.parse.kind")
    cells = [_cell(c, f"{where}.cells[{i}]") for i, c in enumerate(get(d, where, "cells", list))]
    if not cells:
        raise ContractError(f"{where}.cells: empty")
    return SpeedRun(
        model=get(d, where, "model", str),
        argv=_argv(get(d, where, "argv", list), f"{where}.argv"),
        parse=parse,
        cells=cells,
        timeout_s=get(d, where, "timeout_s", float, optional=True) or 300.0,
        tokens_per_sample=dict(d.get("tokens_per_sample") or {}),
        witnesses=[_witness(w, f"{where}.witnesses[{i}]", {c.key for c in cells})
                   for i, w in enumerate(d.get("witnesses") or [])],
        cost_floor_s=get(d, where, "cost_floor_s", float, optional=True) or 0.0,
        cost_floor_df=get(d, where, "cost_floor_df", int, optional=True) or 0,
        cost_critical=_cost_critical(d.get("cost_critical") or [], f"{where}.cost_critical"),
    )


def _cost_critical(value: Any, where: str) -> list[list[float]]:
    if not isinstance(value, list) or not all(
            isinstance(v, list) and len(v) == 3 and all(isinstance(x, (int, float)) and x >= 0
                                                        for x in v) for v in value):
        raise ContractError(f"{where}: expected one [t own, t pooled, guard] of numbers >= 0 "
                            "per look")
    return [[float(x) for x in v] for v in value]


def _witness(d: Any, where: str, cell_keys: set[str]) -> WitnessSpec:
    spec = parse_witness(d, where, cell_keys)
    _argv(spec.argv, f"{where}.argv", PROMPT_PLACEHOLDERS)
    return spec


def _correctness(d: Any) -> Correctness | None:
    if d is None:
        return None
    w = "correctness"
    windows = get(d, w, "windows", int)
    long_windows = get(d, w, "long_windows", int, optional=True) or 0
    looks = [int(x) for x in d.get("looks") or [windows + long_windows]]
    critical = [float(x) for x in get(d, w, "critical", list)]
    if looks != sorted(set(looks)) or looks[0] != windows + long_windows or \
            len(critical) != len(looks):
        raise ContractError(f"{w}.looks: increasing chunk counts from windows + long_windows "
                            f"= {windows + long_windows}, one critical value each")
    if windows < 1 or looks[0] < 2:
        raise ContractError(f"{w}: the first look needs at least 2 windows")
    spec = Correctness(
        score_argv=_argv(get(d, w, "score_argv", list), f"{w}.score_argv"),
        reference_argv=_argv(get(d, w, "reference_argv", list), f"{w}.reference_argv"),
        seed=get(d, w, "seed", int),
        windows=windows,
        window_tokens=get(d, w, "window_tokens", int),
        topk=get(d, w, "topk", int, optional=True) or 8,
        model=get(d, w, "model", str, optional=True) or "",
        timeout_s=get(d, w, "timeout_s", float, optional=True) or 600.0,
        looks=looks,
        critical=critical,
        alpha=_opt(d, "alpha", 0.01),
        margin=_opt(d, "margin", 0.01),
        kl_margin=_opt(d, "kl_margin", 0.02),
        long_windows=long_windows,
        long_window_tokens=get(d, w, "long_window_tokens", int, optional=True) or 0,
        floors={str(k): float(v) for k, v in (d.get("floors") or {}).items()},
        tie_nats=_opt(d, "tie_nats", 0.01),
        max_mismatch=_opt(d, "max_mismatch", 0.02),
        path=get(d, w, "path", str, optional=True) or "",
        tokenize_argv=_tokenize_argv(d.get("tokenize_argv"), f"{w}.tokenize_argv"),
        guards=[str(g) for g in d.get("guards") or []],
        long_score_tokens=get(d, w, "long_score_tokens", int, optional=True) or 0,
        deep_critical=_opt(d, "deep_critical", 0.0),
        long_scored=get(d, w, "long_scored", str, optional=True) or "all",
        drift=_drift(d.get("drift"), len(looks)),
    )
    if spec.long_scored not in LONG_SCORED or (spec.long_scored == "deep" and spec.long_windows
                                              and spec.long_score_tokens < 1):
        raise ContractError(f"{w}.long_scored: {spec.long_scored!r}; one of {list(LONG_SCORED)}, "
                            "'deep' with long_score_tokens >= 1 when there are long windows")
    if spec.window_tokens < 2 or (spec.long_windows and spec.long_window_tokens < 2):
        raise ContractError(f"{w}: windows need at least 2 tokens")
    if set(spec.floors) - {"top1", "kl"}:
        raise ContractError(f"{w}.floors: only top1 and kl, got {sorted(spec.floors)}")
    return spec


DRIFT_KEYS = {"top1", "kl", "alpha", "critical", "clear", "top1_margin", "kl_margin"}


def _drift(d: Any, looks: int) -> dict[str, Any]:
    if not d:
        return {}
    w = "correctness.drift"
    if not isinstance(d, dict) or set(d) != DRIFT_KEYS:
        raise ContractError(f"{w}: the keys {sorted(DRIFT_KEYS)}")
    out: dict[str, Any] = {k: float(get(d, w, k, float))
                           for k in DRIFT_KEYS - {"critical", "clear"}}
    for key in ("critical", "clear"):
        values = [float(x) for x in get(d, w, key, list)]
        if len(values) != looks or any(not v > 0 for v in values):
            raise ContractError(f"{w}.{key}: one positive t quantile per look ({looks})")
        out[key] = values
    return out


def _tokenize_argv(value: Any, where: str) -> list[str]:
    """Optional; when given it may only name what the harness hands a tokenizer, and must
    name the text it reads and the file it writes."""
    if not value:
        return []
    argv = _argv(value, where)
    used = {name for arg in argv for name in _placeholders(arg)}
    if used - set(TOKENIZE_PLACEHOLDERS) or not {"text", "out"} <= used:
        raise ContractError(f"{where}: placeholders {sorted(used)}; a tokenizer takes only "
                            f"{', '.join(TOKENIZE_PLACEHOLDERS)} and needs {{text}} and {{out}}")
    return argv


def _opt(d: Any, key: str, default: float) -> float:
    """An optional number of the correctness section; 0 is a value, only absence is default."""
    value = get(d, "correctness", key, float, optional=True)
    return default if value is None else float(value)


def parse_job(doc: Any) -> Job:
    """Validate a job description document and return it typed."""
    if get(doc, "", "schema", str) != JOB_SCHEMA:
        raise ContractError(f"schema: expected {JOB_SCHEMA!r}, got {doc.get('schema')!r}")
    models = [Model(
        name=get(m, f"models[{i}]", "name", str),
        path=get(m, f"models[{i}]", "path", str),
        sha256=get(m, f"models[{i}]", "sha256", str),
        role=one_of(m.get("role", "primary"), ("primary", "guard"), f"models[{i}].role"),
        namespace=m.get("namespace", ""),
    ) for i, m in enumerate(get(doc, "", "models", list))]
    job = Job(
        job_id=get(doc, "", "job_id", str),
        profile=get(doc, "", "profile", str),
        repo=get(doc, "", "repo", str),
        base_sha=sha(get(doc, "", "base_sha", str), "base_sha"),
        head_sha=sha(get(doc, "", "head_sha", str), "head_sha"),
        merge_base=doc.get("merge_base"),
        build_argv=_argv(get(doc, "", "build_argv", list), "build_argv"),
        build_timeout_s=get(doc, "", "build_timeout_s", float),
        artifacts=[str(a) for a in get(doc, "", "artifacts", list)],
        models=models,
        runs=[_run(r, f"runs[{i}]") for i, r in enumerate(get(doc, "", "runs", list))],
        rule=parse_rule(get(doc, "", "rule", dict)),
        correctness=_correctness(doc.get("correctness")),
        env={str(k): str(v) for k, v in (doc.get("env") or {}).items()},
        cache_dir=doc.get("cache_dir"),
        sandbox=sandbox_spec.check_spec(doc.get("sandbox")),
        limits=sandbox_spec.check_limits(doc.get("limits"), "limits"),
        box=str(doc.get("box") or ""),
        profile_version=get(doc, "", "profile_version", int, optional=True) or 1,
    )
    for i, run in enumerate(job.runs):
        if run.cost_critical and len(run.cost_critical) != len(job.rule.looks):
            raise ContractError(f"runs[{i}].cost_critical: one per look {job.rule.looks}")
    names = {m.name for m in job.models}
    for cell in job.cells:
        if cell.model not in names:
            raise ContractError(f"cell {cell.key}: model {cell.model!r} is not in models")
    if len({c.key for c in job.cells}) != len(job.cells):
        raise ContractError("runs: a cell appears twice")
    guards = job.correctness.guards if job.correctness else []
    if set(guards) - names or len(set(guards)) != len(guards):
        raise ContractError(f"correctness.guards: {guards} must name models of the job, once each")
    return job


def load_job(path: Path) -> Job:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ContractError(f"{path}: cannot read job description: {exc}") from exc
    return parse_job(doc)
