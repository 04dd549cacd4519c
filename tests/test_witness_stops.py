"""The harness stops a witness only where the bot's judgement of the record is already decided.

engine/measure/witness.py stops at a look before the last when the bot (evalbot/grading/
confirmation.py) would confirm a cell on the pairs so far (the saving's lower bound above the
other covered cells' claims), would contradict the claims (the upper bound below half of them),
or when a head output failed verification. Each is checked against the bot's own judgement of
the record the harness wrote; a witness runs for a cell the grading calls improved, `improving`
at the run's end included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.contract import witness_spec
from engine.measure import witness
from evalbot.grading import confirmation

DECODE, PREFILL = "m/decode@4096", "m/prefill@0"


def _spec(looks: list[int]) -> witness_spec.WitnessSpec:
    return confirmation.with_stops(witness_spec.parse_witness(
        {"name": "w", "argv": ["x"], "cells": {DECODE: 1000, PREFILL: 4000}, "prompt_tokens": 4,
         "output": {"kind": "ids_line", "prefix": "IDS "}, "output_tokens": 3, "pairs": looks},
        "w", {DECODE, PREFILL}), 0.01)


def _launch(head_saves: list[float], bad_output_at: int = -1) -> witness.Launch:
    """Main takes 10 s; the head's process of pair i saves head_saves[i] seconds; its output
    is main's except in pair bad_output_at."""
    launched: list[str] = []

    def launch(side: str, argv: list[str], timeout_s: float, prompt: list[int]) -> witness.Timed:
        pair = len(launched) // 2
        launched.append(side)
        if side == "base":
            return witness.Timed(True, "IDS 1 2 3", 10.0, False)
        ids = "IDS 9 9 9" if pair == bad_output_at else "IDS 1 2 3"
        return witness.Timed(True, ids, 10.0 - head_saves[pair], False)

    return launch


def _claims(decode_s: float, prefill_s: float) -> dict[str, tuple[float, float]]:
    return {DECODE: (decode_s, 8.0), PREFILL: (prefill_s, 0.5)}


def _judged(record: witness.WitnessRecord, claims: dict[str, tuple[float, float]]) -> dict[str, Any]:
    alpha = confirmation.confirm_alpha(0.01, 1)
    return confirmation.judge(record.to_dict(), claims, alpha)


def _pairs(record: witness.WitnessRecord) -> int:
    return len(record.samples) // 2


def test_a_bare_saving_does_not_stop_it_short_of_the_other_cells_claims(tmp_path: Path) -> None:
    # 0.10 s saved, steadily: certain above 0 at 4 pairs, but prefill@0 claims 0.08 s of it;
    # what is left for decode (0.02 s) is not certain at the first look
    saves = [0.10, 0.13, 0.07, 0.10] + [0.10, 0.12, 0.08, 0.10]
    claims = _claims(0.10, 0.08)
    spec = _spec([4, 8])
    bare = witness.measure(spec, lambda a, s: a, _launch(saves), tmp_path, warmup=0)
    assert _pairs(bare) == 4  # without the margin it would have stopped ...
    assert _judged(bare, claims)["cells"][DECODE]["status"] != "confirmed"  # ... unconfirmed
    stop = witness.stop_for(claims, [DECODE])
    assert stop.margin_s == pytest.approx(0.08)
    record = witness.measure(spec, lambda a, s: a, _launch(saves), tmp_path, warmup=0, stop=stop)
    assert _pairs(record) == 8


@pytest.mark.parametrize(("saves", "claimed", "pairs", "status"), [
    # prints a 2 s saving, saves nothing: contradicted at 4 pairs, as the bot then judges it
    ([0.01, -0.01, 0.0, 0.01] + [0.0] * 8, 2.0, 4, "contradicted"),
    # claims 0.05 s, saves nothing, noise 0.1 s: neither confirmed nor contradicted at a look
    (list(np.random.default_rng(4).normal(0, 0.1, 12)), 0.05, 12, "unconfirmed"),
])
def test_it_stops_where_the_bot_decides_and_not_before(tmp_path: Path, saves: list[float],
                                                        claimed: float, pairs: int,
                                                        status: str) -> None:
    claims = _claims(claimed, 0.0)
    record = witness.measure(_spec([4, 8, 12]), lambda a, s: a, _launch(saves), tmp_path,
                             warmup=0, stop=witness.stop_for(claims, [DECODE]))
    assert _pairs(record) == pairs
    assert _judged(record, claims)["cells"][DECODE]["status"] == status


def test_a_head_output_that_fails_verification_stops_it(tmp_path: Path) -> None:
    saves = [0.5] * 12
    claims = _claims(0.5, 0.0)
    record = witness.measure(_spec([4, 8, 12]), lambda a, s: a, _launch(saves, bad_output_at=1),
                             tmp_path, warmup=0, stop=witness.stop_for(claims, [DECODE]))
    assert _pairs(record) == 4  # nothing more to learn: the witness cannot confirm
    assert _judged(record, claims)["cells"][DECODE]["status"] == "unverified"


@pytest.mark.parametrize("seed", range(40))
def test_every_early_stop_is_the_bots_decision(tmp_path: Path, seed: int) -> None:
    # random heads: a real saving of 0-0.3 s with 0.05-0.2 s of noise, claims of 0-0.6 s
    rng = np.random.default_rng(seed)
    saves = list(rng.normal(rng.uniform(0, 0.3), rng.uniform(0.05, 0.2), 12))
    claims = _claims(float(rng.uniform(0, 0.6)), float(rng.uniform(0, 0.1)))
    spec = _spec([4, 8, 12])
    record = witness.measure(spec, lambda a, s: a, _launch(saves), tmp_path, warmup=0,
                             stop=witness.stop_for(claims, [DECODE]))
    statuses = {c["status"] for c in _judged(record, claims)["cells"].values()}
    if _pairs(record) < 12:  # stopped early: the bot's judgement of it is decided
        assert statuses & {"confirmed", "contradicted"}, (saves, claims)


def test_a_cell_still_settling_its_tier_is_witnessed() -> None:
    spec = _spec([4, 8])
    assert witness.to_confirm(spec, {DECODE: "improving", PREFILL: "neutral"}) == [DECODE]
    assert witness.to_confirm(spec, {DECODE: "improved", PREFILL: "improving"}) == [DECODE, PREFILL]
    assert witness.to_confirm(spec, {DECODE: "regressed", PREFILL: "undecided"}) == []


def test_the_job_carries_both_critical_values_per_look() -> None:
    spec = _spec([4, 8, 12])
    assert len(spec.stop_t) == len(spec.spoof_t) == 3
    assert all(s > t for s, t in zip(spec.spoof_t, spec.stop_t, strict=True))  # 99.9% > 99.5%
    with pytest.raises(witness_spec.ContractError, match="spoof_t"):
        witness_spec.parse_witness(
            {"name": "w", "argv": ["x"], "cells": {DECODE: 3}, "prompt_tokens": 4,
             "output": {"kind": "ids_line"}, "output_tokens": 3, "pairs": [4, 8],
             "spoof_t": [9.0]}, "w", {DECODE})
