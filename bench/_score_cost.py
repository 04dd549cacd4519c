"""Correctness's box seconds per round, modelled per window and fitted to the GPU fixtures.

A score process (one per side, round and scored model; the cold reference's one per round and
window kind) costs
    load + sum over its windows of (fill + scored positions x per-position cost)
  load      the least load of the model's witness processes (bench/_paces.py: a tool of the same
            tree loading the same file)
  fill      a window's unscored ids (a long window of `long_scored: deep` before its deep
            positions) at the model's sweep prefill rate at that size (bench/_paces.py)
  per-position cost   fitted so that the model gives what the fixtures' processes took, pooled:
            sparkinfer's sides from `correctness.seconds` of score-threads-h100, the tool as it
            is (32.1-32.3 s for 26 short windows of 128 ids and 2 long of 33,024 scored at their
            last 256 positions: the shipped section's round one; a main that read windows from
            its cache left out), the reference from accept-h100's (313-320 s, every
            position of those windows scored; verdict-cost-h100's reference read the cache, so
            its 0.1-0.2 s are left out); llamacpp, whose results record no such seconds, from
            each fixture's rest less its warm-ups and the older harnesses' rest
            (bench/_gpu_fixtures.py), taken as both sides' and the reference's processes, the
            reference scoring what the sides did with the same tool
  another model than the fixtures scored (sparkinfer's Qwen3.6 guard): the fitted cost plus the
            difference of the two models' decode steps (their decode witnesses' paces)
The windows are the profile's correctness section as make_job builds it (its looks: round j
ends at looks[j] windows, the long ones all in round one), the load and fill from the profile's
runs of the model: the shipped profile read at run time, or the one a bench is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any, NamedTuple

from bench import _gpu_fixtures, _paces
from bench._simbox import POLICY, shipped
from evalbot.engine.contract.job import Correctness
from evalbot.engine.contract.shared.segments import scored_from
from evalbot.engine.measure.speed import SIDES
from evalbot.evaluation.profile import Profile
from evalbot.grading.correctness_policy import job_correctness

# the reference runs a process per window kind in a round (engine/scoring/correctness.py
# `_references`); every fixture's round one has both kinds
REFERENCE_KINDS = 2


class Window(NamedTuple):
    kind: str  # short | long
    scored: int  # positions scored
    filled: int  # ids run before them without logits


def correctness(profile: Profile) -> Correctness | None:
    """The profile's correctness section as make_job builds it (evaluation/jobspec.py), whatever
    models the profile keeps (a one-model variant of the shipped one included)."""
    if profile.correctness is None:
        return None
    return job_correctness(profile.correctness, POLICY.correctness, 1)


def scored_models(profile: Profile) -> list[str]:
    """The models the profile's section scores that the profile runs: the scored one, then its
    guards (a one-model variant of the shipped profile scores its own model alone)."""
    spec = correctness(profile)
    names = {m.name for m in profile.models}
    return [m for m in (spec.model, *spec.guards) if m in names] if spec else []


def rounds(spec: Correctness) -> list[list[Window]]:
    """The windows each round scores (engine/scoring/correctness.py `plan`: long ones first, all
    in round one; look j ends at looks[j] windows), each as (scored, filled) by segments.py."""
    sizes = [("long", spec.long_window_tokens)] * spec.long_windows + \
        [("short", spec.window_tokens)] * (spec.looks[-1] - spec.long_windows)
    windows = [Window(kind, n - 1 - scored_from(spec, kind, n), scored_from(spec, kind, n))
               for kind, n in sizes]
    edges = [0, *spec.looks]
    return [windows[a:b] for a, b in zip(edges[:-1], edges[1:], strict=True)]


def side_round_s(fixtures: str, profile: Profile, model: str, windows: list[Window]) -> float:
    """One side's score process of a round: its load and its windows."""
    return _load_s(fixtures, profile, model) + \
        _windows_s(fixtures, profile, model, windows, reference=False)


def reference_round_s(fixtures: str, profile: Profile, model: str,
                      windows: list[Window]) -> float:
    """The cold reference of a round: a process per window kind (short, long) it has. Assumed:
    it scores a long window of `long_scored: deep` from its first deep position, as the sides
    do (accept-h100's reference scored every position), and its fill costs what the engine's
    does (the reference's own fill was never timed apart)."""
    loads = len({w.kind for w in windows}) * _load_s(fixtures, profile, model)
    return loads + _windows_s(fixtures, profile, model, windows, reference=True)


def _windows_s(fixtures: str, profile: Profile, model: str, windows: Iterable[Window],
               reference: bool) -> float:
    """The windows' fills and scored positions. A scored position is a step of the model plus
    its output (the logits' top-k, written and read back), and the output's cost is the
    vocabulary's: a model the fixtures did not score (sparkinfer's Qwen3.6 guard, the Qwen3.5
    vocabulary of Qwythos) differs by its step alone."""
    fitted, side, ref = _fit(fixtures)
    gap = 0.0 if model == fitted else _step_s(fixtures, profile, model) - \
        _step_s(fixtures, shipped(fixtures), fitted)
    position = (ref if reference else side) + gap
    pace = _model_pace(fixtures, profile, model)
    return sum(fill_s(pace, w.filled) + w.scored * position for w in windows)


def fill_s(pace: _paces.RunPace, ids: int) -> float:
    """`ids` run without logits, at the sweep's prefill rate of the smallest context holding
    them (past the largest swept context, the largest's: a slower fill at depth is left out)."""
    ctxs = sorted(int(k.split("@")[1]) for k in pace.rates if k.startswith("prefill@"))
    if not ids:
        return 0.0
    if not ctxs:  # an assumed pace gives one rate per metric
        return ids / pace.rates["prefill"]
    return ids / pace.rates[f"prefill@{next((c for c in ctxs if c >= ids), ctxs[-1])}"]


def _model_pace(fixtures: str, profile: Profile, model: str) -> _paces.RunPace:
    """The model's first run's pace: its prefill rates time the fills."""
    run = next(r for r in profile.runs if r.model == model)
    return _paces.run_pace(fixtures, model, {c.ctx for c in run.cells})


def _load_s(fixtures: str, profile: Profile, model: str) -> float:
    """A score process's start and model load: the least of the model's witness processes'
    loads (a tool of the same tree loading the same file; bench/_paces.py)."""
    return min(_paces.witness_pace(fixtures, model, spec).load_s
               for run in profile.runs if run.model == model for spec in run.witnesses)


def _step_s(fixtures: str, profile: Profile, model: str) -> float:
    """One decode step of the model: its first decode witness's timed work per step."""
    return next(_paces.witness_pace(fixtures, model, spec).seconds / (1 + spec.steps)
                for run in profile.runs if run.model == model
                for spec in run.witnesses if _paces.ToolRun.of(spec).mode == "decode")


# --- the per-position costs, fitted to the fixtures ---

@dataclass(frozen=True)
class Observed:
    """Seconds a fixture's score processes took, and what they did."""

    seconds: float
    processes: int
    windows: tuple[Window, ...]


@cache
def _fit(fixtures: str) -> tuple[str, float, float]:
    """(the fixtures' scored model, a side's per-position cost, the reference's): the cost
    that makes load + fills + positions equal what the fixtures' processes took, pooled. The
    load and fills are those of the fixtures' shipped profile."""
    docs = [d for d in _gpu_fixtures.results(fixtures)
            if (d.get("correctness") or {}).get("tokens")]
    model = docs[0]["correctness"]["model"]
    profile = shipped(fixtures)
    load, pace = _load_s(fixtures, profile, model), _model_pace(fixtures, profile, model)
    timed = [d for d in docs if d["correctness"].get("seconds")]
    if timed:
        _, refs = _timed(timed)
        sides, _ = _timed([d for d in _gpu_fixtures.score_tool_results(fixtures)
                           if (d.get("correctness") or {}).get("seconds")])
        return model, _fitted(sides, load, pace), _fitted(refs, load, pace)
    both = _fitted(_untimed(docs), load, pace)
    return model, both, both


def _timed(docs: list[dict[str, Any]]) -> tuple[list[Observed], list[Observed]]:
    """Results with `correctness.seconds`: a process per side, and the reference's one per
    window kind (short, long) scoring every position of its windows (accept-h100's did); a
    reference the cache served (`correctness.reference.cached`) is left out: its seconds are
    the cache's reads."""
    sides = [Observed(d["correctness"]["seconds"][s], _rounds(d), _as_scored(d))
             for d in docs for s in SIDES
             if s == "head" or not (d["correctness"].get("main_scores") or {}).get("cached")]
    refs = [Observed(d["correctness"]["seconds"]["reference"], REFERENCE_KINDS + _rounds(d) - 1,
                     _every_position(d)) for d in docs
            if not (d["correctness"].get("reference") or {}).get("cached")]
    return sides, refs


def _rounds(doc: dict[str, Any]) -> int:
    """A side's score processes: one a round (its looks; every fixture stopped at its first)."""
    return len(doc["correctness"].get("looks") or []) or 1


def _untimed(docs: list[dict[str, Any]]) -> list[Observed]:
    """Older results time no score process: their scoring (bench/_gpu_fixtures.py) is taken as
    a process per side and the reference's per window kind, all scoring what the sides scored
    (the reference runs the same tool, built from the pinned source: llamacpp)."""
    return [Observed(_gpu_fixtures.untimed_scoring_s(d), len(SIDES) + REFERENCE_KINDS,
                     _as_scored(d) * (len(SIDES) + 1)) for d in docs]


def _fitted(observed: list[Observed], load_s: float, pace: _paces.RunPace) -> float:
    spent = sum(o.seconds - o.processes * load_s - sum(fill_s(pace, w.filled) for w in o.windows)
                for o in observed)
    return spent / sum(w.scored for o in observed for w in o.windows)


def _as_scored(doc: dict[str, Any]) -> tuple[Window, ...]:
    """A fixture's windows as its sides scored them: a short one at every position, the long
    ones sharing what `tokens` leaves (their deep positions), filled before that."""
    c = doc["correctness"]
    kinds = [w["kind"] for w in c["windows"]]
    short = c["window_tokens"] - 1
    deep = (c["tokens"] - kinds.count("short") * short) // max(kinds.count("long"), 1)
    return tuple(Window(k, short, 0) if k == "short" else
                 Window(k, deep, c["long_window_tokens"] - 1 - deep) for k in kinds)


def _every_position(doc: dict[str, Any]) -> tuple[Window, ...]:
    c = doc["correctness"]
    size = {"short": c["window_tokens"], "long": c["long_window_tokens"]}
    return tuple(Window(w["kind"], size[w["kind"]] - 1, 0) for w in c["windows"])


def describe(fixtures: str) -> str:
    """The model's fitted inputs, for a table's notes."""
    model, side, reference = _fit(fixtures)
    return (f"{fixtures}: fitted on {model}, a scored position {1000 * side:.1f} ms a side, "
            f"{1000 * reference:.1f} ms the reference, a score process's load "
            f"{_load_s(fixtures, shipped(fixtures), model):.1f} s")
