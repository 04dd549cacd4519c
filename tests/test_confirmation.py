"""A printed rate is a claim: the harness's own clock must confirm a saving before it earns a tier.

Table tests of the pure confirmation (evalbot/grading/confirmation.py), then hostile heads through the real
harness and the real grading: a stub engine printing 1.3x, 2x and 10x its real rates (its witness
work honest), and the demo engine printing 2x. Each must end without a tier.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalbot.engine.contract import witness_spec
from evalbot.engine.contract.job import parse_job
from evalbot.engine.contract.results import validate
from evalbot.engine.harness.steps import run_job
from evalbot.engine.measure import witness
from evalbot.grading import confirmation
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from tests.stub_engine import decode_cell, decode_witness, job_doc, make_repo

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = load_labels(ROOT / "labels.yaml").policy("default")
TIERS = {"eval:XL", "eval:L", "eval:M", "eval:S", "eval:XS"}


def _witness(base_s: float, head_s: float, n: int = 5, jitter: float = 0.01,
             verified: bool = True, source: str = "witness") -> dict[str, Any]:
    samples = []
    for p in range(n):
        j = jitter * (1 if p % 2 else -1)
        samples += [{"pair": p, "side": "base", "seconds": base_s + j, "dropped": False,
                     "verified": source == "witness"},
                    {"pair": p, "side": "head", "seconds": head_s - j / 2, "dropped": False,
                     "verified": verified and source == "witness"}]
    return {"name": "w", "source": source, "cells": {"m/decode@128": 1000}, "samples": samples}


def _status(cell: dict[str, Any], witness: dict[str, Any]) -> str:
    results = {"rule": {"alpha": 0.01}, "cells": [cell], "witnesses": [witness]}
    graded = [{"key": "m/decode@128", "decision": "improved", "tier": "XL", "lo": 0.5}]
    confirmation.confirm(results, graded)
    return str(graded[0]["decision"])


# main decodes at 100 tok/s: 1000 tokens take 10 s of a witness that runs 12 s in all
@pytest.mark.parametrize(
    ("head_rate", "base_s", "head_s", "jitter", "verified", "source", "expected"),
    [
        (200.0, 12.0, 7.0, 0.01, True, "witness", "improved"),  # a real 2x, seen: 5 s saved
        (105.0, 12.0, 11.52, 0.01, True, "witness", "improved"),  # a real +5%: 0.48 s saved
        (200.0, 12.0, 12.0, 0.01, True, "witness", "spoofed"),  # claims 5 s, saves nothing
        (105.0, 12.0, 12.0, 0.01, True, "witness", "spoofed"),  # +5% claimed, a precise 0 seen
        (105.0, 12.0, 12.0, 0.3, True, "witness", "unconfirmed"),  # ... a noisy 0 seen
        (200.0, 12.0, 9.0, 0.01, True, "witness", "improved"),  # 3 of 5 s shown: some saving
        (200.0, 12.0, 11.0, 0.01, True, "witness", "spoofed"),  # 1 of 5 s: well under half
        (105.0, 12.0, 11.52, 0.5, True, "witness", "unconfirmed"),  # real, but inside the noise
        (200.0, 12.0, 7.0, 0.01, False, "witness", "unconfirmed"),  # output not main's: no proof
        (200.0, 12.0, 7.0, 0.01, True, "samples", "unconfirmed"),  # samples can't confirm ...
        # ... but can contradict: no longer REJECT-grade (issue 46: wall times alone REJECTed
        # about 1 honest gain in 600), the cell is not believed (inconclusive), not spoofed
        (200.0, 12.0, 12.0, 0.01, True, "samples", "unconfirmed"),
    ],
)
def test_confirmation_table(head_rate, base_s, head_s, jitter, verified, source, expected):
    assert _status(decode_cell(100.0, head_rate), _witness(base_s, head_s, jitter=jitter,
                                                    verified=verified, source=source)) == expected


def test_the_tier_is_judged_on_no_more_than_the_witness_measured() -> None:
    # printed 2x (lower bound +90%), but the witness saw 3 of the claimed 5 s: about +43%
    results = {"rule": {"alpha": 0.01}, "cells": [decode_cell(100.0, 200.0)],
               "witnesses": [_witness(12.0, 9.0)]}
    graded = [{"key": "m/decode@128", "decision": "improved", "tier": "XL", "lo": 0.9}]
    confirmation.confirm(results, graded)
    assert graded[0]["decision"] == "improved"
    assert 0.3 < graded[0]["lo"] == graded[0]["witness_lo"] < 3 / 7


def test_a_witness_saving_more_than_mains_time_for_the_cell_bounds_no_gain() -> None:
    # main's rates say the cell's 1000 tokens take 1 s; the witness saved 5 s of its 12 s
    results = {"rule": {"alpha": 0.01}, "cells": [decode_cell(1000.0, 2000.0)],
               "witnesses": [_witness(12.0, 7.0)]}
    graded = [{"key": "m/decode@128", "decision": "improved", "tier": "XL", "lo": 0.9}]
    confirmation.confirm(results, graded)
    assert graded[0]["decision"] == "improved" and graded[0]["lo"] == 0.9
    assert graded[0]["witness_lo"] is None and graded[0]["witness_gain"] is None
    json.dumps(graded, allow_nan=False)  # a verdict is signed: no infinity in it


def test_too_few_pairs_confirm_nothing() -> None:
    assert _status(decode_cell(100.0, 200.0), _witness(12.0, 7.0, n=2)) == "unconfirmed"


def test_looks_split_alpha_so_stopping_early_confirms_no_more() -> None:
    # 4 pairs saving 0.48 s, sd 0.15: confirmed as one fixed look, not as the first of two
    cell, timed = decode_cell(100.0, 105.0), _witness(12.0, 11.52, n=4, jitter=0.085)
    assert _status(cell, timed) == "improved"
    assert _status(cell, {**timed, "looks": [4, 8]}) == "unconfirmed"


def _scripted(saving_s: list[float]) -> tuple[witness.Launch, list[int]]:
    """A launch whose pair i saves saving_s[i] seconds (main takes 10 s), output always main's."""
    launched: list[int] = []

    def launch(side: str, argv: list[str], timeout_s: float, prompt: list[int]) -> witness.Timed:
        pair = len(launched) // 2
        launched.append(pair)
        seconds = 10.0 - (saving_s[pair] if side == "head" else 0.0)
        return witness.Timed(True, "IDS 1 2 3", seconds, False)

    return launch, launched


@pytest.mark.parametrize(("savings", "pairs_run"), [
    ([2.0, 2.1, 1.9, 2.0] + [2.0] * 4, 4),  # clear at the first look: stops there
    ([2.0, -1.0, 3.0, 0.5] + [2.0] * 4, 8),  # noisy at 4: measures on to 8
    ([0.0] * 8, 8),  # nothing saved: to the last look (the evidence that can contradict)
])
def test_the_harness_stops_at_the_first_look_that_confirms(tmp_path, savings, pairs_run):
    spec = confirmation.with_stops(witness_spec.parse_witness(
        {"name": "w", "argv": ["x"], "cells": {"m/decode@128": 3}, "prompt_tokens": 4,
         "output": {"kind": "ids_line", "prefix": "IDS "}, "output_tokens": 3,
         "pairs": [4, 8]}, "w", {"m/decode@128"}), 0.01)
    launch, launched = _scripted(savings)
    record = witness.measure(spec, lambda arg, side: arg, launch, tmp_path, warmup=0)
    assert max(launched) + 1 == pairs_run == len(record.samples) // 2
    assert record.to_dict()["looks"] == [4, 8]


@pytest.mark.parametrize("pairs", [[8, 4], [2, 8], [], "4", [4, 4]])
def test_witness_looks_must_increase_from_three(pairs) -> None:
    with pytest.raises(witness_spec.ContractError, match="pairs"):
        witness_spec.parse_witness({"name": "w", "argv": ["x"], "cells": {"c": 3}, "prompt_tokens": 4,
                               "output": {"kind": "ids_line"}, "output_tokens": 3,
                               "pairs": pairs}, "w", {"c"})


def test_a_lie_on_one_cell_is_not_covered_by_a_real_saving_on_another() -> None:
    # One witness covers two cells: a real 2x on the first (5 s) and a claimed 2x on the second
    # (another 5 s) that the witness does not show: the second cell must not be confirmed.
    real, lie = decode_cell(100.0, 200.0), {**decode_cell(100.0, 200.0), "ctx": 4096}
    witness = {**_witness(22.0, 17.0), "cells": {"m/decode@128": 1000, "m/decode@4096": 1000}}
    graded = [{"key": "m/decode@128", "decision": "improved", "tier": "XL", "lo": 0.5},
              {"key": "m/decode@4096", "decision": "improved", "tier": "XL", "lo": 0.5}]
    confirmation.confirm({"rule": {"alpha": 0.01}, "cells": [real, lie],
                          "witnesses": [witness]}, graded)
    assert [g["decision"] for g in graded] == ["unconfirmed", "unconfirmed"]


def test_regressions_and_cells_without_witness() -> None:
    graded = [{"key": "m/decode@128", "decision": "regressed", "tier": None},
              {"key": "m/prefill@9", "decision": "improved", "tier": "L", "lo": 0.5}]
    results = {"rule": {"alpha": 0.01}, "cells": [decode_cell(100.0, 50.0)], "witnesses": []}
    confirmation.confirm(results, graded)
    assert graded[0]["decision"] == "regressed"  # a regression needs no confirmation
    assert (graded[1]["decision"], graded[1]["tier"]) == ("unconfirmed", None)


# ---- hostile heads through the harness and the grading ---------------------------------------

@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, str]]:
    # main decodes at 400 tok/s: each witness's decode (256 tokens) is 0.64 s of CPU, far above
    # the CPU clock's noise (hundredths of a second), and half the CPU of 200 tok/s for the suite.
    variants = {"lie1.3": {"lie": 1.3}, "lie2": {"lie": 2.0}, "lie10": {"lie": 10.0},
                "honest": {"decode": 800.0}}
    return make_repo(tmp_path_factory.mktemp("stub"), variants, main={"decode": 400.0})


def _verdict(stub: tuple[Path, str, dict[str, str]], head: str, out: Path
             ) -> tuple[dict[str, Any], dict[str, Any]]:
    repo, main, shas = stub
    doc = job_doc(repo, main, shas[head], witnesses=[decode_witness()])
    results = validate(run_job(parse_job(doc), out))
    verdict = grade(results, DEFAULT)
    assert grade(json.loads(json.dumps(results)), DEFAULT) == verdict  # re-grading agrees
    return results, verdict


@pytest.mark.parametrize("head", ["lie1.3", "lie2", "lie10"])
def test_stub_printing_inflated_rates_earns_no_tier(stub, tmp_path, head):
    results, verdict = _verdict(stub, head, tmp_path)
    assert verdict["tier"] is None and verdict["headline"] not in TIERS
    assert not any(c["decision"] == "improved" for c in verdict["cells"])
    assert verdict["kind"] in {"spoofed", "inconclusive"}
    # The harness's own check of the samples' wall time fails no head (issue 46: wall times
    # alone are no REJECT); whatever failure it records of a liar is the PR's, as spoofed.
    for failure in results["failures"]:
        assert (failure["side"], failure["attribution"], failure["kind"]) == \
            ("head", "pr", "spoofed")
    if head == "lie10":  # ten times: the harness-owned witness contradicts it outright
        assert verdict["kind"] == "spoofed"


def test_stub_with_a_real_speedup_keeps_its_tier(stub, tmp_path):
    results, verdict = _verdict(stub, "honest", tmp_path)
    assert results["failures"] == []
    decode = next(c for c in verdict["cells"] if c["metric"] == "decode")
    assert (decode["decision"], decode["confirmation"]) == ("improved", "confirmed"), \
        verdict["witnesses"]
    assert verdict["headline"] in TIERS


def test_a_liar_with_no_witness_is_not_believed_and_no_run_fails_on_wall_times(stub, tmp_path):
    # Issue 46: the harness's wall-time check REJECTed about 1 honest gain in 600 by noise, so
    # it fails no run now; it records its reason on the run's samples witness, and wall times
    # alone make a cell not believed. With no harness-owned witness to contradict it, the 10x
    # liar ends inconclusive (no tier), where it was REJECTed by the samples' wall times before.
    repo, main, shas = stub
    doc = job_doc(repo, main, shas["lie10"], witnesses=[])
    results = validate(run_job(parse_job(doc), tmp_path))
    assert results["failures"] == []
    verdict = grade(results, DEFAULT)
    assert verdict["kind"] == "inconclusive" and verdict["tier"] is None
    assert not any(c["decision"] == "improved" for c in verdict["cells"])
