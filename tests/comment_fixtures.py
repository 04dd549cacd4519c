"""Verdicts for comment tests: the demo's four (graded from the results of a real `evalbot demo`
run, tests/data/comments/) and the three GPU runs of docs/gpu-e2e.md (their published numbers,
transcribed: the device machine's verdict files were not kept)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalbot.config.settings import REPO_ROOT
from evalbot.engine.contract.verdict import VERDICT_SCHEMA
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels

DATA = Path(__file__).parent / "data" / "comments"
DEMO = ("faster", "neutral", "slow_long", "broken")
MAIN = "a746479e469264b0437da63b8e45b9bf83bfe39f"
RULE = {"alpha": 0.01, "significance": 0.02, "tolerance": 0.02, "sd_floor": 0.01,
        "sd_floors": {}, "equivalence_alpha": 0.05}


def demo_results(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"demo-{name}.results.json").read_text())


def demo_verdict(name: str) -> dict[str, Any]:
    return grade(demo_results(name), load_labels(REPO_ROOT / "labels.yaml").policy("default"))


def _cell(metric: str, ctx: int, base: float, head: float, change: float, lo: float, hi: float,
          pairs: int, decision: str) -> dict[str, Any]:
    neutral = decision == "neutral"
    return {"key": f"qwen3-0p6b-synth/{metric}@{ctx}", "model": "qwen3-0p6b-synth",
            "role": "primary", "metric": metric, "ctx": ctx, "unit": "tok/s",
            "decision": decision, "speedup": change / 100, "lo": lo / 100, "hi": hi / 100,
            "interval": "equivalence" if neutral else "simultaneous", "pairs": pairs,
            "base_median": base, "head_median": head, "dropped_pairs": 0, "tier": None}


def _ci(mean: float, lo: float, hi: float) -> dict[str, float]:
    return {"mean": mean, "lo": lo, "hi": hi, "se": (hi - lo) / 5.15}


def _correctness(head_top1: tuple[float, float, float], head_kl: tuple[float, float, float],
                 decision: str, base_only: int, p: float) -> dict[str, Any]:
    one, zero = _ci(1.0, 1.0, 1.0), _ci(0.0, 0.0, 0.0)
    h1 = _ci(*head_top1)
    return {"decision": decision, "tokens": 1016, "chunks": 8, "seed": 1503854158,
            "path": "the profile's score command on the built artifacts",
            "base": {"top1": one, "kl": zero}, "head": {"top1": h1, "kl": _ci(*head_kl)},
            "diff_top1": _ci(head_top1[0] - 1, head_top1[1] - 1, head_top1[2] - 1),
            "diff_kl": _ci(*head_kl), "discordant": {"head_only_right": 0,
                                                     "base_only_right": base_only},
            "mcnemar_p": p, "margin": 0.01, "kl_margin": 0.02, "drift": False,
            "floors": {"top1": 0.9, "kl": 0.2, "calibrated": False},
            "consistency": {"checked": False, "note": "no decode cell recorded greedy tokens",
                            "cells": [], "head_mismatch": False}, "reasons": [],
            "looks": [{"chunks": 8, "tokens": 1016, "decision": decision}]}


def _verdict(kind: str, headline: str, head: str, cells: list[dict[str, Any]],
             corr: dict[str, Any]) -> dict[str, Any]:
    return {"schema": VERDICT_SCHEMA, "kind": kind, "headline": headline, "labels": [headline],
            "tier": None, "best_cell": None, "context_label": None,
            "regression_labels": [f"regression-{c['ctx'] // 1024}k" if c["ctx"] else
                                  "regression-0" for c in cells if c["decision"] == "regressed"],
            "models": [{"name": "qwen3-0p6b-synth", "role": "primary",
                        "namespace": "eval-qwen3", "label": f"eval-qwen3:{headline[5:]}"}],
            "cells": cells, "failures": [], "correctness": corr, "reasons": [],
            "correctness_guards": [], "witnesses": [],
            "provenance": {"job_id": "gpu-e2e", "profile": "llamacpp", "policy": "default@2",
                           "base_sha": MAIN, "head_sha": head, "seed": corr["seed"],
                           "rule": RULE, "box": {"name": "h200"}}}


def gpu_verdicts() -> dict[str, dict[str, Any]]:
    """The A/A, slow and broken evaluations as docs/gpu-e2e.md shows them."""
    inert = _correctness((1.0, 1.0, 1.0), (0.0, 0.0, 0.0), "inert", 0, 1.0)
    aa = [_cell("decode", 0, 584.6, 585.8, 0.2, -1.2, 1.6, 3, "neutral"),
          _cell("decode", 4096, 526.1, 531.2, 0.5, -0.9, 2.0, 3, "neutral"),
          _cell("prefill", 0, 39167.9, 41484.3, 3.0, -5.3, 12.0, 10, "inconclusive"),
          _cell("prefill", 4096, 26470.8, 26218.1, -0.4, -1.4, 0.7, 6, "neutral")]
    slow = [_cell("decode", 0, 586.4, 480.5, -18.9, -32.2, -2.9, 6, "regressed"),
            _cell("decode", 4096, 528.9, 459.7, -14.7, -22.7, -5.8, 10, "regressed"),
            _cell("prefill", 0, 41684.4, 41904.1, 1.9, -6.6, 11.2, 10, "inconclusive"),
            _cell("prefill", 4096, 26399.5, 26594.8, 0.8, 0.1, 1.6, 10, "neutral")]
    broken = [_cell("decode", 0, 583.4, 578.8, -0.5, -1.6, 0.6, 10, "neutral"),
              _cell("decode", 4096, 528.4, 521.7, -0.7, -1.7, 0.3, 6, "neutral"),
              _cell("prefill", 0, 53644.6, 53503.6, -0.2, -7.4, 7.6, 10, "inconclusive"),
              _cell("prefill", 4096, 25157.9, 23858.2, -3.9, -6.9, -0.8, 10, "regressed")]
    reject = _correctness((0.1624, -0.1888, 0.5136), (6.2, 3.76, 8.63), "reject", 851, 6.7e-257)
    return {
        "aa": _verdict("inconclusive", "eval:inconclusive", MAIN, aa, inert),
        "slow": _verdict("regressed", "eval:REJECT", "4d5369a078eddf02ef6579df5e92bf088aa47826",
                         slow, inert),
        "broken": _verdict("incorrect", "eval:REJECT", "9952b24258b7a7caf1fca1064019a1d74dd166e3",
                           broken, reject),
    }


def seven_cells() -> dict[str, Any]:
    """A 7-cell GPU verdict: the slow run with three more decode depths."""
    v = gpu_verdicts()["slow"]
    extra = [_cell("decode", ctx, 500.0, 420.0, -16.0, -24.0, -7.0, 10, "regressed")
             for ctx in (8192, 16384, 32768)]
    return {**v, "cells": v["cells"] + extra}
