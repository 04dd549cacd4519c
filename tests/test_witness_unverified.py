"""A witness credits only verified work: the output ids a head process invented are work it may
have skipped (engine/contract/shared/witness_interval.py `unverified_work_s`), so the saving
that skipping could explain is added to what the lower bound must clear, in the bot's
confirmation and in the harness's stop alike. Table tests of the pure functions, then the
junk-tail head through the real harness and grading on the stub engine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalbot.engine.contract import witness_spec
from evalbot.engine.contract.job import parse_job
from evalbot.engine.contract.results import validate
from evalbot.engine.contract.shared import witness_interval
from evalbot.engine.harness.steps import run_job
from evalbot.engine.measure import witness
from evalbot.grading import confirmation
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from tests.stub_engine import _git, decode_cell, decode_witness, job_doc, make_repo

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = load_labels(ROOT / "labels.yaml").policy("default")
TIERS = {"eval:XL", "eval:L", "eval:M", "eval:S", "eval:XS"}
KEY = "m/decode@128"


def _samples(agreements: list[float], base_s: float = 12.0, head_s: float = 7.0,
             jitter: float = 0.01, dropped: int = -1) -> list[dict[str, Any]]:
    out = []
    for p, a in enumerate(agreements):
        j = jitter * (1 if p % 2 else -1)
        out += [{"pair": p, "side": "base", "seconds": base_s + j, "dropped": p == dropped,
                 "verified": True, "agreement": 1.0},
                {"pair": p, "side": "head", "seconds": head_s - j / 2, "dropped": p == dropped,
                 "verified": a >= 0.5, "agreement": a}]
    return out


# main's witness process takes 12 s
@pytest.mark.parametrize(("agreements", "dropped", "expected"), [
    ([1.0] * 5, -1, 0.0),  # all ids main's: nothing unproven
    ([0.5] * 5, -1, 6.0),  # half invented: half of main's measured time
    ([1.0, 0.5, 1.0, 0.5, 1.0], -1, 2.4),  # the mean over the pairs
    ([0.1, 1.0, 1.0, 1.0], -1, 0.0),  # an unverified pair is not judged: not counted
    ([0.5, 1.0, 1.0, 1.0], 0, 0.0),  # nor is a dropped one
])
def test_unverified_work_is_the_mean_unproven_share(agreements, dropped, expected):
    samples = _samples(agreements, jitter=0.0, dropped=dropped)
    assert witness_interval.unverified_work_s(samples) == pytest.approx(expected)


def test_the_scale_is_mains_measured_time_not_its_printed_rate() -> None:
    # main's witness took 12 s; what its printed rates say of its work plays no part
    assert witness_interval.unverified_work_s(_samples([0.75] * 4, base_s=12.0, jitter=0.0)) == 3.0
    assert witness_interval.unverified_work_s(_samples([0.75] * 4, base_s=20.0, jitter=0.0)) == 5.0


def test_samples_without_agreement_are_graded_as_before() -> None:
    samples = [{k: v for k, v in s.items() if k != "agreement"} for s in _samples([0.5] * 4)]
    assert witness_interval.unverified_work_s(samples) == 0.0


# main decodes 1000 output ids at 100 tok/s: 10 s of a 12 s witness; a share 1 - a invented
# is credited as up to (1 - a) x 12 s skipped
@pytest.mark.parametrize(("head_rate", "head_s", "agreement", "expected"), [
    (200.0, 7.0, 1.0, "improved"),  # a real 2x, every id main's
    (200.0, 7.0, 0.5, "unconfirmed"),  # the 5 s seen are the 5 s of ids it invented
    (200.0, 9.5, 0.75, "unconfirmed"),  # 2.5 s seen, 2.5 s invented
    (400.0, 4.5, 0.5, "improved"),  # 7.5 s seen: 2.5 s more than the invented half explains
    (105.0, 11.52, 0.9, "unconfirmed"),  # +5% seen, 1 s unproven
    (105.0, 11.52, 0.99, "improved"),  # +5% seen, 0.1 s unproven
    (200.0, 12.0, 0.5, "spoofed"),  # a contradiction stays one
])
def test_a_witness_confirms_only_what_verified_work_shows(head_rate, head_s, agreement,
                                                         expected):
    w = {"name": "w", "source": "witness", "cells": {KEY: 1000}, "output_tokens": 1000,
         "samples": _samples([agreement] * 5, head_s=head_s)}
    graded = [{"key": KEY, "decision": "improved", "tier": "XL", "lo": 0.9}]
    confirmation.confirm({"rule": {"alpha": 0.01}, "cells": [decode_cell(100.0, head_rate)],
                          "witnesses": [w]}, graded)
    assert graded[0]["decision"] == expected


def _scripted(agreement: float) -> witness.Launch:
    """main 10 s and ids 0..9; the head 5 s faster, with the last (1 - agreement) ids invented."""
    def launch(side: str, argv: list[str], timeout_s: float, prompt: list[int]) -> witness.Timed:
        good = 10 if side == "base" else round(10 * agreement)
        ids = list(range(good)) + [999] * (10 - good)
        return witness.Timed(True, "IDS " + " ".join(map(str, ids)),
                             10.0 - (5.0 if side == "head" else 0.0), False)

    return launch


@pytest.mark.parametrize(("agreement", "claimed_s", "pairs_run", "settled_by"), [
    (1.0, 5.0, 4, "confirmed"),  # every id main's: the 5 s seen confirm at the first look
    (0.5, 6.0, 8, ""),  # the 5 s seen are the invented half's: measured on to the last look
    # ... and when they explain all it claims, no look can confirm: stop
    (0.5, 5.0, 4, "unresolvable"),
])
def test_the_harness_does_not_stop_on_a_saving_invented_ids_explain(tmp_path, agreement,
                                                                    claimed_s, pairs_run,
                                                                    settled_by):
    spec = confirmation.with_stops(witness_spec.parse_witness(
        {"name": "w", "argv": ["x"], "cells": {KEY: 10}, "prompt_tokens": 4,
         "output": {"kind": "ids_line", "prefix": "IDS "}, "output_tokens": 10,
         "pairs": [4, 8], "min_agreement": 0.5}, "w", {KEY}), 0.01)
    claims = {KEY: (claimed_s, 10.0)}  # 10 ids at main's 1 tok/s
    record = witness.measure(spec, lambda arg, side: arg, _scripted(agreement), tmp_path,
                             warmup=0, stop=witness.stop_for(claims, [KEY]))
    assert (len(record.samples) // 2, record.settled_by) == (pairs_run, settled_by)


# ---- the junk-tail head through the harness and the grading ----------------------------------

JUNK_STEPS = 256  # the stub's decode witness: 256 decode ids fed one per step


def _junk_tail_repo(root: Path, agreement: float) -> tuple[Path, str, str]:
    """The stub engine, and a head whose witness decodes only the first `agreement` share of its
    steps and answers the rest at once with an id main never prints, and whose bench skips the
    same share of its decode work and prints rates true to the work it did (its samples' wall
    times agree with them)."""
    repo, main, _ = make_repo(root, {}, main={"decode": 400.0})
    engine = (repo / "engine.py").read_text()
    for old, new in [
        ("    while True:\n", "    done = 0\n    while True:\n"),
        ("        burn(step_s)\n",
         "        done += 1\n"
         "        if done > cfg[\"junk\"] * cfg[\"junk_steps\"]:\n"
         "            print(\"EVALBOT_STEP 1000\", flush=True)\n"
         "            continue\n"
         "        burn(step_s)\n"),
        ('(32 / cfg["decode"]', '(cfg["junk"] * 32 / cfg["decode"]'),
        ('cfg["decode"] * noise * cfg.get("lie", 1)', 'cfg["decode"] * noise / cfg["junk"]'),
    ]:
        assert engine.count(old) == 1, old
        engine = engine.replace(old, new)
    (repo / "engine.py").write_text(engine)
    cfg = json.loads((repo / "speed.json").read_text())
    (repo / "speed.json").write_text(json.dumps({**cfg, "junk": agreement,
                                                 "junk_steps": JUNK_STEPS}))
    _git(repo, "commit", "-q", "-am", "junk tail")
    head = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", main)
    return repo, main, head


def test_a_junk_tail_head_earns_no_tier(tmp_path):
    repo, main, head = _junk_tail_repo(tmp_path, 0.5)
    doc = job_doc(repo, main, head,
                  witnesses=[{**decode_witness(JUNK_STEPS), "min_agreement": 0.5}])
    results = validate(run_job(parse_job(doc), tmp_path / "job"))
    verdict = grade(results, DEFAULT)
    assert grade(json.loads(json.dumps(results)), DEFAULT) == verdict  # re-grading agrees
    assert verdict["tier"] is None and verdict["headline"] not in TIERS
    assert not any(c["decision"] == "improved" for c in verdict["cells"])
    # the witness verified the head (agreement >= 0.5): what denies the tier is the invented
    # half of its ids, not a failed check
    timed = next(w for w in results["witnesses"] if w["source"] == "witness")
    heads = [s for s in timed["samples"] if s["side"] == "head"]
    assert heads and all(s["verified"] and s["agreement"] < 0.6 for s in heads)
    assert all(s["wall_s"] >= s["seconds"] for s in timed["samples"])
    # and its decode cell was claimed and witnessed, not left out: the bot denied it
    decode = next(c for c in verdict["cells"] if c["metric"] == "decode")
    assert decode["decision"] == "unconfirmed"


def _looked(floor: float) -> witness_spec.WitnessSpec:
    return confirmation.with_stops(witness_spec.parse_witness(
        {"name": "w", "argv": ["x"], "cells": {KEY: 10}, "prompt_tokens": 4,
         "output": {"kind": "ids_line", "prefix": "IDS "}, "output_tokens": 10,
         "pairs": [4, 8], "sd_floor_s": floor, "floor_df": 5 if floor else 0}, "w", {KEY}), 0.01)


@pytest.mark.parametrize(("floor", "sd", "own_claim_s", "expected"), [
    (0.05, 0.05, 0.04, True),  # 0.04 s beyond the invented ids: under the last look's 0.06 s
    (0.05, 0.05, 0.09, False),  # 0.09 s: a true claim would be confirmed at 8 pairs
    (0.05, 0.5, 0.09, False),  # the floor's width, whatever these pairs' sd (the bot's guard)
    (0.0, 0.05, 0.04, True),  # no floor: the own sd at the last look's t (4.03): 0.08 s
    (0.0, 0.01, 0.04, False),  # ... steadier pairs resolve it
    (0.05, 0.05, -1.0, True),  # the invented ids explain all it claims
])
def test_a_claim_the_last_look_cannot_resolve(floor, sd, own_claim_s, expected):
    d = 1.0 + sd * np.array([1.0, -1.0, 1.0, -1.0])
    assert witness.unresolvable(_looked(floor), d, own_claim_s) is expected


def _with_witness(**extra: Any) -> dict[str, Any]:
    from tests.test_contracts import _results

    sample = {"pair": 0, "side": "head", "seconds": 1.5, "dropped": False, "verified": True,
              **extra}
    return {**_results(), "witnesses": [{"name": "w", "source": "witness", "cells": {KEY: 10},
                                         "samples": [sample]}]}


@pytest.mark.parametrize(("extra", "error"), [
    ({}, None),  # a harness before wall_s: still valid
    ({"wall_s": 3.8}, None),
    ({"wall_s": -1.0}, "wall_s"),
    ({"wall_s": "3.8"}, "wall_s"),
])
def test_a_witness_sample_may_record_its_wall_time(extra, error):
    from evalbot.engine.contract.checks import ContractError

    if error is None:
        validate(_with_witness(**extra))
    else:
        with pytest.raises(ContractError, match=error):
            validate(_with_witness(**extra))
