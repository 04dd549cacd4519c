"""The issue-16 cases of the score contract and the KL estimate, each with the verdict it gets.

Dumps are refused (head: the PR's failure; base or reference: infrastructure's) before any
statistic sees them; the KL estimate is checked against the exact KL of full distributions.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalbot.config.settings import REPO_ROOT
from evalbot.engine.contract.score_dump import DumpError, check_windows
from evalbot.engine.contract.shared.correctness_stats import chunk, kl_tokens
from evalbot.engine.contract.shared.segments import DEEP_PIECES, chunk_looks, deep_chunks
from evalbot.engine.harness.steps import _failure
from evalbot.engine.measure.gpu import device_identity
from evalbot.engine.measure.parsing import ParseError, read_score_lines
from evalbot.engine.scoring.correctness import score
from evalbot.engine.scoring.tokens import ScoreFailure, speed_tokens
from evalbot.engine.sides.build import Built
from evalbot.grading.correctness_policy import ALPHA, critical_values, decide, deep_critical
from evalbot.grading.policy import CorrectnessPolicy
from tests.test_tokenize import _job, demo, scripts  # noqa: F401  (fixtures)

POLICY = CorrectnessPolicy(margin=0.01, kl_margin=0.02, top1_floor=0.0, kl_ceiling=100.0)
GOOD = [[5, -0.5], [7, -1.5], [2, -2.5], [9, -3.0]]


def window(*positions: tuple[list[Any], Any]) -> dict[str, Any]:
    return {"top": [p[0] for p in positions], "argmax": [p[1] for p in positions]}


@pytest.mark.parametrize(("top", "argmax", "message"), [
    ([[5, float("nan")], *GOOD[1:]], 5, "not finite"),
    ([[5, float("-inf")], *GOOD[1:]], 7, "not finite"),
    ([[5, -0.5], [5, -0.5], [2, -2.5], [9, -3.0]], 5, "appears twice"),
    (GOOD, 7, "argmax 7 is not the top entry"),
    (GOOD[:3], 5, "3 top entries, 4 needed"),
    ([[5, -0.1], [7, -0.2], [2, -0.3], [9, -0.4]], 5, "sum to more than 1"),
    ([[5, 0.5], *GOOD[1:]], 5, "above 0"),
    ([[-1, -0.5], *GOOD[1:]], 5, "not a token id"),
    ([[5, -0.5, 1], *GOOD[1:]], 5, "not an [id, logprob] pair"),
])
def test_a_bad_position_is_refused_never_repaired(top: list[Any], argmax: Any,
                                                  message: str) -> None:
    with pytest.raises(DumpError, match="window 0 position 0: .*" + message.replace("[", r"\[")):
        check_windows([window((top, argmax))], topk=4)


def test_entries_are_sorted_before_the_first_k_are_kept() -> None:
    shuffled = [[9, -3.0], [1, -9.0], [7, -1.5], [5, -0.5], [2, -2.5]]
    [got] = check_windows([window((shuffled, 5))], topk=4)
    assert got["top"] == [GOOD]  # the old parser kept the first 4 as printed: lost id 5
    text = "S i=0 tgt=5 am=5 lp=-0.5 top=" + ",".join(f"{i}:{lp}" for i, lp in shuffled)
    assert read_score_lines(text, topk=4)[0]["top"] == [GOOD]


@pytest.mark.parametrize(("line", "message"), [
    ("S i=0 tgt=5 am=5 lp=-0.5 top=5:nan,7:-1.5", "not finite"),
    ("S i=0 tgt=5 am=5 lp=-0.5 top=5:-0.5,5:-0.5", "appears twice"),
    ("S i=0 tgt=5 am=7 lp=-0.5 top=5:-0.5,7:-1.5", "not the top entry"),
])
def test_the_text_path_refuses_what_the_json_path_refuses(line: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        read_score_lines(line, topk=2)


def test_rows_are_length_checked_against_the_tokens_asked() -> None:
    two = window((GOOD, 5), (GOOD, 5))
    assert len(check_windows([two], 4, [2])[0]["top"]) == 2
    with pytest.raises(DumpError, match="2 positions, 3 asked"):
        check_windows([two], 4, [3])  # a short reference row: `chunk` used to truncate
    with pytest.raises(DumpError, match="1 windows, 2 were asked"):
        check_windows([two], 4, [2, 2])


def test_an_empty_window_is_an_explicit_error_not_a_crash() -> None:
    with pytest.raises(ValueError, match="a chunk needs the same positive number"):
        chunk(3, "short", [], [], [])
    pos = {"top": GOOD, "argmax": 5}
    with pytest.raises(ValueError, match="1 reference, 0 main"):
        chunk(3, "short", [pos], [], [pos])


# ---- the KL estimate against the exact KL of full distributions ---------------------------
V, K = 4096, 8


def _log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max(1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(1, keepdims=True))


def _dump(lp: np.ndarray) -> list[list[list[float]]]:
    idx = np.argsort(-lp, 1)[:, :K]
    return [[[int(i), float(lp[n, i])] for i in idx[n]] for n in range(lp.shape[0])]


def _logits(rng: np.random.Generator, n: int, scale: float) -> np.ndarray:
    """A language-model-like row (a few strong candidates over a long tail) or, at small
    scale, a random-weight model's flat one."""
    x = rng.standard_normal((n, V)) * scale
    x[:, :40] += rng.standard_normal((n, 40)) * 1.5 * scale
    return _log_softmax(x)


def _exact(p: np.ndarray, q: np.ndarray) -> float:
    return float((np.exp(p) * (p - q)).sum(1).mean())


def _estimate(p: np.ndarray, q: np.ndarray) -> float:
    return float(kl_tokens(_dump(p), _dump(q)).mean())


def _tail_moved(lp: np.ndarray, share: float) -> np.ndarray:
    """`share` of the top-k mass moved into the rest, spread in proportion: ranks unchanged."""
    p = np.exp(lp)
    top = np.zeros_like(p, dtype=bool)
    np.put_along_axis(top, np.argsort(-lp, 1)[:, :K], True, 1)
    moved = share * np.where(top, p, 0).sum(1, keepdims=True)
    rest = np.where(top, 0, p).sum(1, keepdims=True)
    return np.log(np.where(top, p * (1 - share), p * (1 + moved / rest)))


def test_logit_noise_on_a_real_shaped_model_costs_what_it_really_costs() -> None:
    rng = np.random.default_rng(1)
    ref = _logits(rng, 300, 3.0)
    head = _log_softmax(ref + 0.03 * rng.standard_normal(ref.shape))
    exact = _exact(ref, head)
    assert exact < 1e-3
    assert _estimate(ref, head) <= 2 * exact  # floored at -20 it read about 0.09


def test_noise_on_a_random_weight_model_reads_as_noise() -> None:
    rng = np.random.default_rng(2)
    ref = _logits(rng, 300, 0.3)
    base = _log_softmax(ref + 0.01 * rng.standard_normal(ref.shape))
    head = _log_softmax(ref + 0.02 * rng.standard_normal(ref.shape))
    assert abs(_estimate(ref, head) - _estimate(ref, base)) < 1e-3  # the old estimate: > 1 nat


def test_sharpened_logits_and_mass_moved_to_the_tail_are_seen() -> None:
    rng = np.random.default_rng(3)
    ref = _logits(rng, 300, 3.0)
    sharp = _log_softmax(ref * 1.2)
    assert _estimate(ref, sharp) > 0.6 * _exact(ref, sharp)  # renormalised: 0.1 of it
    tail = _tail_moved(ref, 0.2)
    assert _estimate(ref, tail) == pytest.approx(_exact(ref, tail), rel=0.05)  # was 6e-14
    assert np.all(np.argmax(tail, 1) == np.argmax(ref, 1))  # top-1 alone sees nothing


def _chunks(ref: np.ndarray, base: np.ndarray, head: np.ndarray, windows: int
            ) -> list[dict[str, Any]]:
    n = ref.shape[0] // windows
    out = []
    for w in range(windows):
        part = slice(w * n, (w + 1) * n)
        rows = [[{"top": t, "argmax": int(t[0][0])} for t in _dump(x[part])]
                for x in (ref, base, head)]
        out.append(chunk(w, "short", *rows))
    return out


def _decide(recorded: list[dict[str, Any]]) -> dict[str, Any]:
    looks = [len(recorded)]
    section = {"seed": 1, "path": "p", "identical": False, "chunks": recorded,
               "rule": {"looks": looks, "critical": critical_values(looks), "alpha": ALPHA,
                        "margin": POLICY.margin, "kl_margin": POLICY.kl_margin}}
    return decide(section, POLICY)


def test_base_equal_to_the_reference_and_a_noisy_head_is_no_reject() -> None:
    """The issue's first case: 14/14 REJECTed at about 1.1k tokens with the -20 floor."""
    rng = np.random.default_rng(4)
    ref = _logits(rng, 1280, 3.0)
    head = _log_softmax(ref + 0.03 * rng.standard_normal(ref.shape))
    verdict = _decide(_chunks(ref, ref, head, 10))
    assert verdict["decision"] != "reject", verdict["reasons"]
    assert verdict["diff_kl"]["hi"] < POLICY.kl_margin


def test_a_kl_rise_at_unchanged_top1_is_rejected() -> None:
    rng = np.random.default_rng(5)
    ref = _logits(rng, 1280, 3.0)
    head = _tail_moved(ref, 0.3)  # about +0.1 nat, every argmax kept
    verdict = _decide(_chunks(ref, ref, head, 10))
    assert verdict["diff_top1"]["mean"] == 0.0
    assert verdict["decision"] == "reject" and any("mean KL rose" in r
                                                   for r in verdict["reasons"])


def test_tail_figures_sit_beside_the_mean() -> None:
    rng = np.random.default_rng(6)
    ref = _logits(rng, 640, 3.0)
    head = _log_softmax(ref + 0.3 * rng.standard_normal(ref.shape))
    recorded = _chunks(ref, ref, head, 5)
    tails = _decide(recorded)["tails"]
    assert tails["base"] == {"p99": 0.0, "p999": 0.0, "max": 0.0}
    exact_max = max(c["head_kl_max"] for c in recorded)
    assert tails["head"]["max"] == exact_max and 0 < tails["head"]["p99"] <= exact_max
    assert not math.isnan(tails["head"]["p999"])


# ---- through the harness: who is at fault ---------------------------------------------------
NAN_SCORER = """import json, os, sys
tokens, out, topk, side_dir = sys.argv[1:5]
windows = json.load(open(tokens))
bad = os.path.basename(os.getcwd()) == side_dir
rows = [{"top": [[[w[i + 1], float("nan") if bad and i == 3 else -0.1],
                  *[[w[i + 1] + j + 1 if w[i + 1] + j + 1 < 2**31 else j, -5.0 - j]
                    for j in range(int(topk) - 1)]] for i in range(len(w) - 1)],
         "argmax": [w[i + 1] for i in range(len(w) - 1)]} for w in windows]
json.dump({"windows": rows}, open(out, "w"), allow_nan=True)
"""


@pytest.mark.parametrize(("bad", "attribution"), [("head", "pr"), ("base", "infra"),
                                                    ("harness", "infra")])
def test_a_nan_dump_is_the_side_s_explicit_failure(demo: Any, tmp_path: Path,  # noqa: F811
                                                  bad: str, attribution: str) -> None:
    stub = tmp_path / "nan.py"
    stub.write_text(NAN_SCORER)
    job = _job(demo, tmp_path, [])
    assert job.correctness is not None
    where = REPO_ROOT.name if bad == "harness" else bad  # the directory the bad side runs in
    argv = [sys.executable, str(stub), "{tokens}", "{out}", "{topk}", where]
    job = replace(job, correctness=replace(job.correctness, score_argv=argv,
                                           reference_argv=argv))
    built = {}
    for side in ("base", "head"):
        (tmp_path / side).mkdir()
        built[side] = Built(side, "0" * 40, True, 0.0, False, tmp_path / side)
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    speed_tokens(jobdir, job, REPO_ROOT)
    with pytest.raises(ScoreFailure) as err:
        score(job, built, jobdir, REPO_ROOT, device=device_identity())
    side = "reference" if bad == "harness" else bad  # the reference runs from the harness copy
    assert err.value.side == side and err.value.kind == "unparsable"
    assert "score dump is refused" in err.value.message and "not finite" in err.value.message
    failure = _failure("score", "base" if side == "reference" else side, err.value.kind,
                       err.value.message, None)
    assert failure["attribution"] == attribution


DEEP_SCORER = """import json, sys
tokens, out, topk, log = sys.argv[1:5]
doc = json.load(open(tokens))
windows, froms = (doc["windows"], doc["score_from"]) if isinstance(doc, dict) else \\
    (doc, [0] * len(doc))
with open(log, "a") as f:
    f.write(json.dumps(froms) + "\\n")
rows = [{"top": [[[w[i + 1], -0.1], *[[(w[i + 1] + j + 1) % 60000, -5.0 - j]
                                      for j in range(int(topk) - 1)]]
                 for i in range(f, len(w) - 1)],
         "argmax": [w[i + 1] for i in range(f, len(w) - 1)]} for w, f in zip(windows, froms)]
json.dump({"windows": rows}, open(out, "w"))
"""


def test_long_windows_are_scored_at_every_position_their_deepest_alone(
        demo: Any, tmp_path: Path) -> None:  # noqa: F811
    stub, log = tmp_path / "deep.py", tmp_path / "froms.jsonl"
    stub.write_text(DEEP_SCORER)
    job = _job(demo, tmp_path, [])
    assert job.correctness is not None
    argv = [sys.executable, str(stub), "{tokens}", "{out}", "{topk}", str(log)]
    spec = replace(job.correctness, score_argv=argv, reference_argv=argv, long_score_tokens=100)
    counts = chunk_looks(spec, spec.looks)
    job = replace(job, correctness=replace(
        spec, critical=critical_values(counts),
        deep_critical=deep_critical(spec.looks, deep_chunks(spec))))
    built = {side: Built(side, "0" * 40, True, 0.0, False, tmp_path) for side in ("base", "head")}
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    speed_tokens(jobdir, job, REPO_ROOT)
    section = score(job, built, jobdir, REPO_ROOT, device=device_identity())
    deep = [c for c in section["chunks"] if c["kind"] == "deep"]
    assert len(deep) == 2 * DEEP_PIECES and sum(c["positions"] for c in deep) == 200
    longs = [c for c in section["chunks"] if c["kind"] in ("long", "deep")]
    assert sum(c["positions"] for c in longs) == 2 * 1023  # every position of both windows
    assert min(c["first_position"] for c in deep) == 1023 - 100
    assert section["depths"] == {"min": 924, "max": 1023}
    assert len(section["chunks"]) == counts[0] and section["rule"]["chunk_looks"] == counts
    asked = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(not any(a) for a in asked)  # no tool is told to skip positions
    verdict = decide(section, POLICY)
    assert verdict["decision"] == "inert"
    assert any("2 window(s) scored at every position, their deepest judged alone at depths "
               "924 to 1,023" in n for n in verdict["notes"])


def test_a_decode_beyond_the_token_stream_is_not_checked_never_a_pass() -> None:
    from evalbot.engine.scoring.correctness import _consistency_windows

    cells = [{"model": "tiny", "metric": "decode", "ctx": 90,
              "decode_argmax": {"base": [1] * 20, "head": [1] * 20}},
             {"model": "tiny", "metric": "decode", "ctx": 10,
              "decode_argmax": {"base": [1] * 20, "head": [1] * 20}}]
    far, near = _consistency_windows(cells, "tiny", list(range(100)))
    assert far["tokens"] == [] and "beyond the 100-token stream" in far["unchecked"]
    assert near["tokens"] == list(range(30))
    recorded = [chunk(0, "short", *[[{"top": GOOD, "argmax": 5}] * 3] * 3)] * 2
    looks = [2]
    section = {"seed": 1, "path": "p", "identical": True, "chunks": recorded,
               "rule": {"looks": looks, "critical": critical_values(looks), "alpha": ALPHA},
               "consistency": {"checked": False, "cells": [], "note": "n",
                               "unchecked": [{"key": "tiny/decode@90",
                                              "reason": far["unchecked"]}]}}
    verdict = decide(section, POLICY)
    assert not verdict["consistency"]["checked"]
    assert any("not checked for tiny/decode@90" in n for n in verdict["notes"])
