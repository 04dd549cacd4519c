"""Near ties: a stepped witness's STEP lines may carry each step's runner-up id and top-1 minus
top-2 logit margin, and a head's id agrees where it is main's, or main's runner-up at a step where
main's own margin is under the spec's `tie_margin` (engine/measure/witness_output.py `main_ties`,
docs/trust.md "Near ties"). Only main's fields are ever read. Table tests of the reader and the
agreement, then heads through the real harness (`run_job`, the stub engine's stepped witness on
the CPU clock) and the real grading: an honest head whose numerics flip main's near ties keeps
its tier, a head whose ids differ where main was not near a tie is charged for them, and a head
that skips steps and prints fake runner-up and margin fields gets nothing from them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalbot.engine.contract import witness_spec
from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.job import parse_job
from evalbot.engine.contract.results import validate
from evalbot.engine.contract.shared import witness_interval
from evalbot.engine.harness.steps import run_job
from evalbot.engine.measure import witness, witness_output
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from tests.stub_engine import _git, decode_witness, job_doc, make_repo

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = load_labels(ROOT / "labels.yaml").policy("default")
TIERS = {"eval:XL", "eval:L", "eval:M", "eval:S", "eval:XS"}
STEPS = 256
STEP = witness_spec.STEP


# ---- the reader and the agreement -------------------------------------------------------------

def test_a_step_line_is_an_id_or_an_id_runner_up_and_margin() -> None:
    out = f"{STEP}5\n{STEP}7 9 0.01\nnoise\n{STEP}8 3 2.5\n"
    assert witness_output.read_steps(out) == [witness_output.Step(5), witness_output.Step(7, 9, 0.01),
                                       witness_output.Step(8, 3, 2.5)]
    assert witness_output.read_output_ids(out, {"kind": "step_lines"}) == [5, 7, 8]
    assert witness_output.main_ties(witness_output.read_steps(out), 0.05) == [None, 9, None]


@pytest.mark.parametrize("line", ["7 9", "7 9 0.1 4", "7 x 0.1", "7 9 -0.1", "7 9 nan", "7 9 inf"])
def test_a_malformed_step_line_is_unreadable(line: str) -> None:
    with pytest.raises(ValueError):
        witness_output.read_steps(f"{STEP}{line}\n")


def _spec(**extra: Any) -> witness_spec.WitnessSpec:
    return witness_spec.parse_witness(
        {"name": "w", "argv": ["x"], "cells": {"m/decode@128": 4}, "prompt_tokens": 1,
         "steps": 4, "output": {"kind": "step_lines"}, "output_tokens": 5, "clock": "handoff",
         "pairs": 3, "min_agreement": 0.5, **extra}, "w", {"m/decode@128"})


@pytest.mark.parametrize(("value", "ok"), [(0.05, True), (0, True), (0.2, True), (-0.1, False),
                                           (1.5, False), ("0.05", False), (True, False)])
def test_the_tie_margin_is_a_small_logit_margin(value: Any, ok: bool) -> None:
    if ok:
        assert _spec(tie_margin=value).tie_margin == value
    else:
        with pytest.raises(ContractError, match="tie_margin"):
            _spec(tie_margin=value)
    assert _spec().tie_margin == witness_spec.TIE_MARGIN


def _launch(outputs: dict[str, str]) -> witness.Launch:
    def launch(side: str, argv: list[str], timeout_s: float, prompt: list[int]) -> witness.Timed:
        return witness.Timed(True, outputs[side], 1.0, False, wall_s=1.0)
    return launch


def _measured(tmp_path: Path, base: str, head: str, **extra: Any) -> list[dict[str, Any]]:
    record = witness.measure(_spec(**extra), lambda arg, side: arg,
                             _launch({"base": base, "head": head}), tmp_path, warmup=0)
    return record.samples


def _lines(*steps: str) -> str:
    return "".join(f"{STEP}{s}\n" for s in steps)


# main: ids 1 2 3 4 5; a near tie at step 2 (runner-up 20), a wide margin at step 4 (runner-up 40)
MAIN = _lines("1 10 3", "2 20 0.01", "3 30 2", "4 40 0.9", "5 50 1")


@pytest.mark.parametrize(("base", "head", "agreement", "credited", "tie_margin"), [
    (MAIN, _lines("1", "20", "3", "4", "5"), 1.0, 1, None),  # main's runner-up at its near tie
    (MAIN, _lines("1", "20", "3", "4", "5"), 0.8, 0, 0.005),  # ... not under a tighter margin
    (MAIN, _lines("1", "2", "3", "40", "5"), 0.8, 0, None),  # a runner-up where main was sure
    (MAIN, _lines("1", "21", "3", "4", "5"), 0.8, 0, None),  # another id at main's tie
    # the head's own fields claim near ties at every step: they are not read
    (MAIN, _lines("1 1 0", "2 2 0", "3 3 0", "40 4 0", "5 5 0"), 0.8, 0, None),
    # main's lines without fields (a tool before near ties): no credit
    (_lines("1", "2", "3", "4", "5"), _lines("1", "20 2 0", "3", "4", "5"), 0.8, 0, None),
])
def test_only_mains_near_ties_credit_a_heads_runner_up(tmp_path: Path, base: str, head: str,
                                                       agreement: float, credited: int,
                                                       tie_margin: float | None) -> None:
    extra = {} if tie_margin is None else {"tie_margin": tie_margin}
    samples = _measured(tmp_path, base, head, **extra)
    heads = [s for s in samples if s["side"] == "head"]
    bases = [s for s in samples if s["side"] == "base"]
    assert {(s["agreement"], s["tie_credited"]) for s in heads} == {(agreement, credited)}
    assert all(s["agreement"] == 1.0 and s["tie_credited"] == 0 for s in bases
               if "tie_credited" in s)
    ties = 1 if base == MAIN and tie_margin is None else 0
    assert {s["near_ties"] for s in bases} == {ties}


def test_a_head_with_malformed_fields_is_not_verified(tmp_path: Path) -> None:
    samples = _measured(tmp_path, MAIN, _lines("1", "20 x 0", "3", "4", "5"))
    head = next(s for s in samples if s["side"] == "head")
    assert not head["verified"] and head["error"].startswith("unreadable output")


# ---- heads through the harness and the grading ----------------------------------------------

# The stub engine's witness loop prints its id (tests/stub_engine.py WITNESS); main's tool prints
# each step's runner-up and margin too: a near tie (0.01) at one step in 20, by the id.
MAIN_LINE = ('        print(f"EVALBOT_STEP {last} {(last + 500) % 1000} '
             '{0.01 if last % 20 == 0 else 1.0}", flush=True)\n')
LOOP_LINE = '        print(f"EVALBOT_STEP {last}", flush=True)\n'
HEADS = {
    # numerics that flip main's near ties (and only those): main's runner-up there
    "bf16": '        shown = (last + 500) % 1000 if last % 20 == 0 else last\n'
            '        print(f"EVALBOT_STEP {shown} {last} 0.01", flush=True)\n',
    # the same number of flips, at steps where main's margin is wide
    "off-tie": '        shown = (last + 500) % 1000 if last % 20 == 1 else last\n'
               '        print(f"EVALBOT_STEP {shown} {last} 0.01", flush=True)\n',
}


def _replace(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def _repo(root: Path) -> tuple[Path, str, dict[str, str]]:
    """main (decode 400 tok/s, its witness printing near ties) and heads 2x faster whose
    witnesses print other ids at some steps, and a liar (`skipper`) whose witness answers its
    last tenth of steps at once with a guess and fake fields claiming a near tie, and whose
    bench skips the same share of its decode work (rates true to the work it did)."""
    repo, _, _ = make_repo(root, {}, main={"decode": 400.0})
    engine = _replace((repo / "engine.py").read_text(), LOOP_LINE, MAIN_LINE)
    (repo / "engine.py").write_text(engine)
    _git(repo, "commit", "-q", "-am", "main: near ties")
    main = _git(repo, "rev-parse", "HEAD")
    cfg = json.loads((repo / "speed.json").read_text())
    shas = {}
    for name, line in HEADS.items():
        (repo / "engine.py").write_text(_replace(engine, MAIN_LINE, line))
        (repo / "speed.json").write_text(json.dumps({**cfg, "decode": 800.0}))
        _git(repo, "commit", "-q", "-am", name)
        shas[name] = _git(repo, "rev-parse", "HEAD")
        _git(repo, "checkout", "-q", main)
    skipper = engine
    for old, new in [
        ("    while True:\n", "    done = 0\n    while True:\n"),
        ("        burn(step_s)\n",
         "        done += 1\n"
         "        if done > cfg[\"junk\"] * cfg[\"junk_steps\"]:\n"
         "            print(\"EVALBOT_STEP 999 1 0\", flush=True)\n"
         "            continue\n"
         "        burn(step_s)\n"),
        ('(32 / cfg["decode"]', '(cfg["junk"] * 32 / cfg["decode"]'),
        ('cfg["decode"] * noise * cfg.get("lie", 1)', 'cfg["decode"] * noise / cfg["junk"]'),
    ]:
        skipper = _replace(skipper, old, new)
    (repo / "engine.py").write_text(skipper)
    (repo / "speed.json").write_text(json.dumps({**cfg, "junk": 0.9, "junk_steps": STEPS}))
    _git(repo, "commit", "-q", "-am", "skipper")
    shas["skipper"] = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", main)
    return repo, main, shas


@pytest.fixture(scope="module")
def evaluations(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("near-ties")
    repo, main, shas = _repo(root)
    out = {}
    for name, sha in shas.items():
        doc = job_doc(repo, main, sha, witnesses=[{**decode_witness(STEPS), "min_agreement": 0.5}])
        results = validate(run_job(parse_job(doc), root / f"job-{name}"))
        verdict = grade(json.loads(json.dumps(results)), DEFAULT)
        assert grade(results, DEFAULT) == verdict  # re-grading agrees
        timed = next(w for w in results["witnesses"] if w["source"] == "witness")
        out[name] = {"verdict": verdict, "witness": timed,
                     "heads": [s for s in timed["samples"] if s["side"] == "head"],
                     "bases": [s for s in timed["samples"] if s["side"] == "base"]}
    return out


def test_an_honest_head_that_flips_mains_near_ties_keeps_its_tier(evaluations) -> None:
    e = evaluations["bf16"]
    assert e["verdict"]["headline"] in TIERS
    decode = next(c for c in e["verdict"]["cells"] if c["metric"] == "decode")
    assert decode["decision"] == "improved" and decode["confirmation"] == "confirmed"
    # every flip was main's runner-up at main's near tie: credited, and counted for a maintainer
    assert e["witness"]["tie_margin"] == witness_spec.TIE_MARGIN
    for head, base in zip(e["heads"], e["bases"], strict=True):
        assert head["agreement"] == 1.0 and 0 < head["tie_credited"] <= base["near_ties"]
    assert witness_interval.unverified_work_s(e["witness"]["samples"]) == 0.0


def test_a_head_whose_ids_differ_where_main_was_sure_is_charged(evaluations) -> None:
    e = evaluations["off-tie"]
    assert all(s["tie_credited"] == 0 and 0.9 < s["agreement"] < 1.0 for s in e["heads"])
    # the differing share is charged as skipped work: that share of main's measured time
    share = sum(1 - s["agreement"] for s in e["heads"]) / len(e["heads"])
    main_s = sum(s["seconds"] for s in e["bases"]) / len(e["bases"])
    assert witness_interval.unverified_work_s(e["witness"]["samples"]) == pytest.approx(share * main_s)


def test_a_head_that_skips_steps_gets_nothing_from_fake_tie_fields(evaluations) -> None:
    e = evaluations["skipper"]
    assert e["verdict"]["tier"] is None and e["verdict"]["headline"] not in TIERS
    assert all(s["verified"] and s["tie_credited"] == 0 and s["agreement"] < 0.95
               for s in e["heads"])
    decode = next(c for c in e["verdict"]["cells"] if c["metric"] == "decode")
    assert decode["decision"] == "unconfirmed"
