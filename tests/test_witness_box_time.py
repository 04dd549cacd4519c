"""The witnesses take at most a share of the measuring's box time (the profile's
`speed.witness_share`): engine/measure/witness.py `fits` decides before every pair, the harness
gives each witness what the share leaves (engine/measure/speed.py), and a witness cut there
confirms nothing it has not measured. A head cannot buy a tier by making the witness stop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.contract import witness_spec
from engine.contract.checks import ContractError
from engine.contract.job import parse_job
from engine.contract.results import validate
from engine.harness.steps import run_job
from engine.measure import witness
from evalbot.config.errors import ConfigError
from evalbot.evaluation.profile import load_profile
from evalbot.grading import confirmation
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.report.comment import CUT_BY_BOX_TIME, next_step
from evalbot.report.render import render_comment
from tests.stub_engine import decode_witness, job_doc, make_repo

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = load_labels(ROOT / "evalbot" / "labels.yaml").policy("default")
DECODE = "m/decode@4096"


def _samples(walls: list[float]) -> list[dict[str, Any]]:
    return [{"pair": i // 2, "side": "base" if i % 2 == 0 else "head", "wall_s": w}
            for i, w in enumerate(walls)]


@pytest.mark.parametrize(("walls", "kept", "allowance", "fits"), [
    ([], 0, 1.0, True),             # the first pair starts while anything is left ...
    ([], 0, 0.0, False),            # ... and not once nothing is
    ([5, 5], 1, 30.0, True),        # 10 s spent, two more pairs to MIN_PAIRS: 30 s
    ([5, 5], 1, 29.9, False),       # a witness that could not be judged stops at once
    ([5, 5] * 3, 3, 40.0, True),    # judged from here on: one more pair at a time
    ([5, 5] * 3, 3, 39.9, False),
    ([5, 5, 9, 9], 2, 46.0, True),  # the next pair costs what the last one did
    ([5, 5, 9, 9], 2, 45.9, False),
])
def test_fits_table(walls, kept, allowance, fits) -> None:
    assert witness.fits(_samples(walls), kept, allowance) is fits


def _spec(looks: list[int]) -> witness_spec.WitnessSpec:
    return confirmation.with_stops(witness_spec.parse_witness(
        {"name": "w", "argv": ["x"], "cells": {DECODE: 1000}, "prompt_tokens": 4,
         "output": {"kind": "ids_line", "prefix": "IDS "}, "output_tokens": 3, "pairs": looks},
        "w", {DECODE}), 0.01)


def _launch(head_s: float, wall_s: float) -> witness.Launch:
    def launch(side: str, argv: list[str], timeout_s: float, prompt: list[int]) -> witness.Timed:
        return witness.Timed(True, "IDS 1 2 3", 10.0 if side == "base" else head_s, False,
                             wall_s=wall_s)
    return launch


def test_the_witness_stops_before_the_pair_that_would_not_fit(tmp_path: Path) -> None:
    # 12 s a process, 24 s a pair; 100 s allow 4 pairs (96 s), not a fifth
    record = witness.measure(_spec([5, 8]), lambda a, s: a, _launch(10.0, 12.0), tmp_path,
                             warmup=0, allowance_s=100.0)
    assert (record.stopped, len(record.samples) // 2) == ("box_time", 4)
    doc = record.to_dict()
    assert sum(s["wall_s"] for s in doc["samples"]) <= doc["allowance_s"] == 100.0


def test_a_lie_cut_by_the_box_time_stays_without_a_tier(tmp_path: Path) -> None:
    # the head claims 2 s of the witness's 10 and saves none: two pairs fit, the bot judges
    # none (fewer than MIN_PAIRS), so the claim is unconfirmed, never confirmed
    record = witness.measure(_spec([3, 5]), lambda a, s: a, _launch(10.0, 12.0), tmp_path,
                             warmup=0, allowance_s=60.0)
    assert (record.stopped, len(record.samples) // 2) == ("box_time", 1)
    judged = confirmation.judge(record.to_dict(), {DECODE: (2.0, 10.0)},
                                confirmation.confirm_alpha(0.05, 1))
    assert judged["stopped"] == "box_time" and judged["cells"] == {}


def test_the_comment_says_the_box_time_cut_the_witness() -> None:
    verdict = {"kind": "unconfirmed", "witnesses": [{"name": "w", "stopped": "box_time"}]}
    assert next_step(verdict) == CUT_BY_BOX_TIME
    assert next_step({**verdict, "witnesses": [{"stopped": "settled"}]}) != CUT_BY_BOX_TIME


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, str]]:
    return make_repo(tmp_path_factory.mktemp("stub"), {"honest": {"decode": 400.0}},
                     main={"decode": 200.0})


def _evaluate(stub: tuple[Path, str, dict[str, str]], share: float, out: Path
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    repo, main, shas = stub
    doc = job_doc(repo, main, shas["honest"], witnesses=[decode_witness(pairs=8)])
    doc["rule"]["witness_share"] = share  # type: ignore[index]
    results = validate(run_job(parse_job(doc), out))
    return results, grade(json.loads(json.dumps(results)), DEFAULT)


def test_through_the_harness_the_witness_keeps_to_its_share(stub, tmp_path) -> None:
    # the stub's samples are tiny next to its witness: at 0.25 of them, the witness of a real
    # 2x decode is cut before the bot can judge it, and the verdict says so
    results, verdict = _evaluate(stub, 0.25, tmp_path)
    [timed] = [w for w in results["witnesses"] if w["source"] == "witness"]
    measured = sum(s["seconds"] for w in results["witnesses"] if w["source"] == "samples"
                   for s in w["samples"])
    spent = sum(s["wall_s"] for s in timed["samples"])
    assert timed["stopped"] == "box_time" and len(timed["samples"]) == 2  # one pair, then ...
    assert 3 * spent > timed["allowance_s"]  # ... MIN_PAIRS of them would not have fit
    assert timed["allowance_s"] <= 0.25 * measured * 2  # the kept samples, warm-up pair aside
    decode = next(c for c in verdict["cells"] if c["metric"] == "decode")
    assert decode["decision"] == "unconfirmed" and verdict["tier"] is None
    assert "1 usable pair, not judged; stopped at its share of the box time" in \
        render_comment(verdict, results=results)


@pytest.mark.parametrize("share", [0, -0.1, 11, True])
def test_a_share_out_of_range_is_named(share, tmp_path) -> None:
    repo = tmp_path
    doc = job_doc(repo, "a" * 40, "b" * 40)
    doc["rule"]["witness_share"] = share  # type: ignore[index]
    with pytest.raises(ContractError, match="witness_share"):
        parse_job(doc)
    text = (ROOT / "evalbot" / "profiles" / "demo.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("  witness_share: 0.5", f"  witness_share: {share}", 1))
    with pytest.raises(ConfigError, match="witness_share"):
        load_profile(str(bad))


def test_the_shipped_profiles_bound_the_witnesses_box_time() -> None:
    # a quarter on the GPU boxes (docs/trust.md); half for the demo's toy samples
    shares = {name: load_profile(name).speed.witness_share
              for name in ("demo", "llamacpp", "sparkinfer")}
    assert shares == {"demo": 0.5, "llamacpp": 0.25, "sparkinfer": 0.25}
