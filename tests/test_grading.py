"""Policy tables: measurements in, labels out, for `default` and `sparkinfer-compat`.

Results documents come from a small factory: per cell the base and head rates of each pair, the
looks computed with the harness's own arithmetic, validated by engine.contract.results.validate.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.errors import ResultsError
from evalbot.engine.contract.results import RESULTS_SCHEMA, validate
from evalbot.engine.contract.shared import replay
from evalbot.grading.grade import grade
from evalbot.grading.policy import Policy, load_labels
from evalbot.grading.sequential import schedule
from evalbot.report.publication import public_verdict

ROOT = Path(__file__).resolve().parents[1]
BOOK = load_labels(ROOT / "labels.yaml")
DEFAULT, COMPAT = BOOK.policy("default"), BOOK.policy("sparkinfer-compat")
JITTER = (1.0, 1.001, 0.999, 1.0005, 0.9995, 1.0, 1.0002, 0.9998)  # shared by base and head


@dataclass
class C:
    """One cell of a table row: model, metric, context and the true ratio head/base."""

    model: str
    metric: str
    ctx: int
    ratio: float
    base: float = 100.0
    anchor: float = 0.0
    noise: float = 0.0  # alternating +- relative wobble of head only (makes cells undecided)
    pairs: int | None = None  # fewer pairs than the last look: a cell never measured fully


@dataclass
class Doc:
    cells: list[C]
    guards: tuple[str, ...] = ()
    failures: list[dict[str, Any]] = field(default_factory=list)
    looks: tuple[int, ...] = (4, 8)
    floor: float = 1e-6
    significance: float = 0.02
    tolerance: float = 0.02


def results(doc: Doc) -> dict[str, Any]:
    models = sorted({c.model for c in doc.cells})
    bounds = schedule(doc.looks, len(doc.cells), 0.01)
    rule = {"looks": list(doc.looks), "critical": [b.directional for b in bounds],
            "critical_floor": [b.directional_floor for b in bounds],
            "equivalence": [b.equivalence for b in bounds],
            "equivalence_floor": [b.equivalence_floor for b in bounds],
            "equivalence_alpha": 0.05, "family": len(doc.cells), "alpha": 0.01,
            "sd_floor": doc.floor, "sd_floors": {}, "significance": doc.significance,
            "tolerance": doc.tolerance, "warmup": 1, "budget_s": 600.0}
    out = {
        "schema": RESULTS_SCHEMA, "job_id": "t", "profile": "table", "box": {},
        "base": {"sha": "a" * 40, "ok": True}, "head": {"sha": "b" * 40, "ok": True},
        "rule": rule,
        "models": [{"name": m, "path": "/m", "sha256": "0" * 64,
                    "role": "guard" if m in doc.guards else "primary",
                    "namespace": f"eval-{m}"} for m in models],
        "cells": [_record(c, rule) for c in doc.cells],
        "correctness": None, "failures": doc.failures,
    }
    return validate(out)


def _record(c: C, rule: dict[str, Any]) -> dict[str, Any]:
    n = rule["looks"][-1] if c.pairs is None else c.pairs
    samples = []
    for i in range(n):
        j = JITTER[i % len(JITTER)]
        wobble = 1 + (c.noise if i % 2 else -c.noise)
        rates = {"base": c.base * j, "head": c.base * c.ratio * j * wobble}
        for side in (("base", "head") if i % 2 == 0 else ("head", "base")):
            samples.append({"side": side, "value": rates[side], "pair": i, "dropped": False})
    rec = {"model": c.model, "metric": c.metric, "ctx": c.ctx, "unit": "tok/s",
           "higher_is_better": True, "anchor": c.anchor, "samples": samples, "looks": []}
    rec["looks"] = [lk.to_dict() for lk in replay.replay(rec, rule)]
    return rec


def flat(model: str = "q35", metrics: tuple[str, ...] = ("decode",),
         ctxs: tuple[int, ...] = (128, 4096)) -> list[C]:
    return [C(model, m, x, 1.0) for m in metrics for x in ctxs]


def labels(doc: Doc, policy: Policy = DEFAULT) -> list[str]:
    return grade(results(doc), policy)["labels"]


# ---------------------------------------------------------------- default policy

DEFAULT_TABLE: list[tuple[str, Doc, list[str]]] = [
    ("all neutral", Doc(flat()), ["eval:none", "eval-q35:none"]),
    ("XL edge above (lower bound 18.05%)", Doc([C("q35", "decode", 128, 1.1805)]),
     ["eval:XL", "eval-q35:XL", "128-context"]),
    ("XL edge below", Doc([C("q35", "decode", 128, 1.1795)]),
     ["eval:L", "eval-q35:L", "128-context"]),
    ("L edge", Doc([C("q35", "decode", 4096, 1.1005)]), ["eval:L", "eval-q35:L", "4k-context"]),
    ("L edge below", Doc([C("q35", "decode", 4096, 1.0995)]),
     ["eval:M", "eval-q35:M", "4k-context"]),
    ("M edge", Doc([C("q35", "decode", 128, 1.0605)]), ["eval:M", "eval-q35:M", "128-context"]),
    ("M edge below", Doc([C("q35", "decode", 128, 1.0595)]),
     ["eval:S", "eval-q35:S", "128-context"]),
    ("S edge", Doc([C("q35", "decode", 128, 1.0355)]), ["eval:S", "eval-q35:S", "128-context"]),
    ("S edge below", Doc([C("q35", "decode", 128, 1.0345)]),
     ["eval:XS", "eval-q35:XS", "128-context"]),
    ("just above s is XS", Doc([C("q35", "decode", 128, 1.0205)]),
     ["eval:XS", "eval-q35:XS", "128-context"]),
    ("+1.9%, precisely measured, is no material change", Doc([C("q35", "decode", 128, 1.019)]),
     ["eval:none", "eval-q35:none"]),
    ("+1.9% with an interval across +2% stays undecided",
     Doc([C("q35", "decode", 128, 1.019, noise=0.01)], floor=0.005),
     ["eval:inconclusive", "eval-q35:inconclusive"]),
    ("prefill +20% is a 16.7% TTFT cut: L, where decode +20% is XL",
     Doc([C("q35", "prefill", 32768, 1.20)]), ["eval:L", "eval-q35:L", "32k-context"]),
    ("prefill TTFT XL edge (+22.0% rate = 18.03% TTFT)",
     Doc([C("q35", "prefill", 32768, 1.2200)]), ["eval:XL", "eval-q35:XL", "32k-context"]),
    ("best cell wins, never a sum",
     Doc([C("q35", "decode", 128, 1.04), C("q35", "decode", 4096, 1.07),
          C("q35", "decode", 32768, 1.04)]), ["eval:M", "eval-q35:M", "4k-context"]),
    ("regression per context, decode and prefill",
     Doc([C("q35", "decode", 4096, 0.95), C("q35", "prefill", 4096, 0.90),
          C("q35", "decode", 128, 1.10)]),
     ["eval:REJECT", "eval-q35:REJECT", "regression-4k", "regression-4k-pp"]),
    # No tier label under an untiered headline (issue 46): q35's L beside eval:REJECT, and the
    # guard's XL beside eval:none, claimed speed-ups the verdict did not grant; each model now
    # says the headline's word instead.
    ("guard regression makes the headline REJECT",
     Doc([C("q35", "decode", 128, 1.12), C("q36", "decode", 512, 0.96)], guards=("q36",)),
     ["eval:REJECT", "eval-q35:REJECT", "eval-q36:REJECT", "regression-512"]),
    ("a guard's improvement never makes the headline",
     Doc([C("q35", "decode", 128, 1.0), C("q36", "decode", 512, 1.30)], guards=("q36",)),
     ["eval:none", "eval-q35:none", "eval-q36:none"]),
    ("per-model labels in their namespaces",
     Doc([C("q35", "decode", 128, 1.07), C("q36", "decode", 16384, 1.04)]),
     ["eval:M", "eval-q35:M", "eval-q36:S", "128-context"]),
    ("inconclusive is its own label",
     Doc([C("q35", "decode", 128, 1.0, noise=0.04), C("q35", "decode", 4096, 1.0)], floor=0.01),
     ["eval:inconclusive", "eval-q35:inconclusive"]),
    ("an improvement beside an undecided cell is still an improvement",
     Doc([C("q35", "decode", 128, 1.30), C("q36", "decode", 4096, 1.0, noise=0.04)],
         floor=0.01),
     ["eval:XL", "eval-q35:XL", "eval-q36:inconclusive", "128-context"]),
    ("guard infra failure is infra-error, never a silent pass",
     Doc([C("q35", "decode", 128, 1.30), C("q36", "decode", 512, 1.0)], guards=("q36",),
         failures=[{"stage": "speed", "side": "base", "attribution": "infra",
                    "kind": "infra-error", "message": "guard run: box lost", "log_tail": ""}]),
     ["eval:infra-error", "eval-q35:infra-error", "eval-q36:infra-error"]),
    ("a guard cell never measured is infra-error",
     Doc([C("q35", "decode", 128, 1.30), C("q36", "decode", 512, 1.0, pairs=0)],
         guards=("q36",)),
     ["eval:infra-error", "eval-q35:infra-error", "eval-q36:infra-error"]),
    ("a PR crash is REJECT",
     Doc([C("q35", "decode", 128, 1.30, pairs=0)],
         failures=[{"stage": "speed", "side": "head", "attribution": "pr", "kind": "crashed",
                    "message": "exit status 3", "log_tail": ""}]),
     ["eval:REJECT", "eval-q35:REJECT"]),
]


@pytest.mark.parametrize("doc,expected", [(d, e) for _, d, e in DEFAULT_TABLE],
                         ids=[n for n, _, _ in DEFAULT_TABLE])
def test_default_policy_table(doc: Doc, expected: list[str]) -> None:
    assert labels(doc) == expected


def test_verdict_shows_each_cells_interval() -> None:
    verdict = grade(results(Doc([C("q35", "decode", 128, 1.05),
                                 C("q35", "prefill", 4096, 1.0, noise=0.003)], floor=0.004)),
                    DEFAULT)
    for cell in verdict["cells"]:
        assert cell["lo"] < cell["speedup"] < cell["hi"]
        assert cell["sim_lo"] < cell["eq_lo"] < cell["speedup"] < cell["eq_hi"] < cell["sim_hi"]
    decode, prefill = verdict["cells"]
    assert (decode["lo"], decode["interval"]) == (decode["sim_lo"], "simultaneous")
    # a neutral cell shows the interval that decided it, which lies inside (-t, +s)
    assert prefill["decision"] == "neutral" and prefill["interval"] == "equivalence"
    assert -0.02 < prefill["lo"] == prefill["eq_lo"] and prefill["hi"] == prefill["eq_hi"] < 0.02
    assert decode["decision"] == "improved" and decode["speedup"] == pytest.approx(0.05)
    # the PR's figure is published to 3 significant digits (evalbot/report/publication.py)
    shown = public_verdict(verdict)["cells"][0]
    assert shown["head_gmean"] == float(f"{decode['head_gmean']:.3g}")
    assert shown["head_gmean"] / shown["base_gmean"] == pytest.approx(1.05, rel=5e-3)


def test_regression_does_not_reject_when_the_policy_says_so() -> None:
    lenient = replace(DEFAULT, regression_rejects=False)
    doc = Doc([C("q35", "decode", 128, 1.12), C("q35", "decode", 4096, 0.95)])
    assert labels(doc, lenient) == ["eval:L", "eval-q35:REJECT", "128-context", "regression-4k"]


def test_tampered_looks_fail_the_replay() -> None:
    doc = results(Doc([C("q35", "decode", 128, 1.10)]))
    doc["cells"][0]["looks"][-1]["decision"] = "neutral"
    with pytest.raises(ResultsError, match="disagree with the replay"):
        grade(doc, DEFAULT)


def test_tampered_critical_values_are_refused() -> None:
    doc = results(Doc([C("q35", "decode", 128, 1.10)]))
    for key in ("critical", "equivalence_floor"):
        bad = copy.deepcopy(doc)
        bad["rule"][key][0] += 0.5
        with pytest.raises(ResultsError, match=key):
            grade(bad, DEFAULT)


def test_family_smaller_than_the_cells_is_refused() -> None:
    doc = results(Doc(flat()))
    doc["rule"]["family"] = 1
    with pytest.raises(ResultsError, match="family"):
        grade(doc, DEFAULT)


# ---------------------------------------------------------------- sparkinfer-compat

# Statistics at s = 1% so that +2.0% is a significant improvement and the label function's own
# 2% gate decides none against XS.
def compat_doc(*cells: C, guards: tuple[str, ...] = ()) -> Doc:
    return Doc(list(cells), guards=guards, significance=0.01)


COMPAT_TABLE: list[tuple[str, Doc, list[str]]] = [
    ("+2.0% is none", compat_doc(C("q35", "decode", 128, 1.020)), ["eval:none", "eval-q35:none"]),
    ("+2.1% is XS", compat_doc(C("q35", "decode", 128, 1.021)),
     ["eval:XS", "eval-q35:XS", "128-context"]),
    ("XL edge", compat_doc(C("q35", "decode", 128, 1.18)), ["eval:XL", "eval-q35:XL",
                                                              "128-context"]),
    ("XL edge below", compat_doc(C("q35", "decode", 128, 1.1799)),
     ["eval:L", "eval-q35:L", "128-context"]),
    ("L edge", compat_doc(C("q35", "decode", 128, 1.10)), ["eval:L", "eval-q35:L",
                                                             "128-context"]),
    ("L edge below", compat_doc(C("q35", "decode", 128, 1.0999)),
     ["eval:M", "eval-q35:M", "128-context"]),
    ("M edge", compat_doc(C("q35", "decode", 128, 1.06)), ["eval:M", "eval-q35:M",
                                                             "128-context"]),
    ("M edge below", compat_doc(C("q35", "decode", 128, 1.0599)),
     ["eval:S", "eval-q35:S", "128-context"]),
    ("S edge", compat_doc(C("q35", "decode", 128, 1.035)), ["eval:S", "eval-q35:S",
                                                              "128-context"]),
    ("S edge below", compat_doc(C("q35", "decode", 128, 1.0349)),
     ["eval:XS", "eval-q35:XS", "128-context"]),
    # existing-bot.md 4.2: Qwen3.6 +5% over main 470 with its llama.cpp anchor 275.81: D = 1.5,
    # fair 8.5% x 1.5 capped at 2g = 10%: L; without an anchor (their 16k/32k wiring bug): S.
    ("difficulty boost, capped at 2g", compat_doc(C("q36", "decode", 512, 1.05, 470.0, 275.81)),
     ["eval:L", "eval-q36:L", "512-context"]),
    ("no anchor: frontier reference", compat_doc(C("q36", "decode", 16384, 1.05, 470.0)),
     ["eval:S", "eval-q36:S", "16k-context"]),
    # A +3.4% Qwythos gain at 128 (main 290): M with its own anchor 220.84, S with Qwen3.6's.
    ("intended Qwythos anchor", compat_doc(C("q35", "decode", 128, 1.034, 290.0, 220.84)),
     ["eval:M", "eval-q35:M", "128-context"]),
    ("mis-wired anchor", compat_doc(C("q35", "decode", 128, 1.034, 290.0, 275.81)),
     ["eval:S", "eval-q35:S", "128-context"]),
    ("prefill by TTFT reduction: +20% pp is 16.7%: L",
     compat_doc(C("q35", "prefill", 4096, 1.20, 5000.0, 9000.0)),
     ["eval:L", "eval-q35:L", "4k-context"]),
    ("prefill with a plausible llama anchor (slower than main): boosted, capped at 2g",
     compat_doc(C("q35", "prefill", 4096, 1.10, 500.0, 450.0)),
     ["eval:XL", "eval-q35:XL", "4k-context"]),
    ("prefill replaces decode only with a strictly higher tier",
     compat_doc(C("q35", "decode", 4096, 1.07), C("q35", "prefill", 4096, 1.08, 5000.0)),
     ["eval:M", "eval-q35:M", "4k-context"]),
    ("prefill with a higher tier wins",
     compat_doc(C("q35", "decode", 4096, 1.07), C("q35", "prefill", 32768, 1.25, 5000.0)),
     ["eval:XL", "eval-q35:XL", "32k-context"]),
    ("the context of largest raw gain is tiered, not the one with the best tier",
     compat_doc(C("q35", "decode", 128, 1.034, 290.0, 220.84), C("q35", "decode", 4096, 1.040)),
     ["eval:S", "eval-q35:S", "4k-context"]),
    # q35's L under eval:REJECT claimed a speed-up the verdict did not grant (issue 46)
    ("guard regression is REJECT",
     compat_doc(C("q35", "decode", 128, 1.10), C("q36", "decode", 4096, 0.97), guards=("q36",)),
     ["eval:REJECT", "eval-q35:REJECT", "eval-q36:REJECT", "regression-4k"]),
]


@pytest.mark.parametrize("doc,expected", [(d, e) for _, d, e in COMPAT_TABLE],
                         ids=[n for n, _, _ in COMPAT_TABLE])
def test_compat_policy_table(doc: Doc, expected: list[str]) -> None:
    assert labels(doc, COMPAT) == expected


def test_compat_reports_its_arithmetic() -> None:
    verdict = grade(results(compat_doc(C("q36", "decode", 512, 1.05, 470.0, 275.81))), COMPAT)
    got = verdict["cells"][0]["compat"]
    assert got["gain"] == pytest.approx(0.05)
    # main's geometric mean carries the factory's jitter (a few 1e-4): hence rel=1e-3
    assert got["fair_gain"] == pytest.approx(0.05 * 470.0 / 275.81, rel=1e-3)
    assert got["difficulty"] == pytest.approx(1.5)
    assert got["effective"] == pytest.approx(0.10)
    assert got["anchor"] == "llama.cpp"
