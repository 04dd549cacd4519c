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

from evalbot.engine.contract import witness_spec
from evalbot.engine.measure import witness
from evalbot.grading import confirmation

DECODE, PREFILL = "m/decode@4096", "m/prefill@0"
STEPS, PROMPT = 1000, 4000  # a 4000-id prefill, then 1000 decode ids fed one per step


def _spec(looks: list[int]) -> witness_spec.WitnessSpec:
    return confirmation.with_stops(witness_spec.parse_witness(
        {"name": "w", "argv": ["x"], "cells": {DECODE: STEPS, PREFILL: PROMPT},
         "prompt_tokens": PROMPT, "steps": STEPS, "output": {"kind": "step_lines"},
         "output_tokens": STEPS + 1, "clock": "handoff", "pairs": looks},
        "w", {DECODE, PREFILL}), 0.01)


def _steps(ids: list[int]) -> str:
    """A stepped witness's output: one STEP line per id (the argmax after the prompt, then
    after each fed id)."""
    return "".join(f"{witness_spec.STEP}{i}\n" for i in ids)


MAINS = _steps([(7 * i) % 1000 for i in range(STEPS + 1)])
INVENTED = _steps([1000] * (STEPS + 1))  # no id main's


def _launch(head_saves: list[float], bad_output_at: int = -1) -> witness.Launch:
    """Main takes 10 s; the head's process of pair i saves head_saves[i] seconds; its output
    is main's except in pair bad_output_at. Every process is fed the prompt and one id per
    step, fresh for each pair."""
    launched: list[str] = []
    fed: list[list[int]] = []

    def launch(side: str, argv: list[str], timeout_s: float, prompt: list[int]) -> witness.Timed:
        pair = len(launched) // 2
        launched.append(side)
        assert len(prompt) == PROMPT + STEPS and prompt not in fed[:2 * pair]
        fed.append(prompt)
        if side == "base":
            return witness.Timed(True, MAINS, 10.0, False)
        return witness.Timed(True, INVENTED if pair == bad_output_at else MAINS,
                             10.0 - head_saves[pair], False)

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
    saves = [0.10, 0.11, 0.09, 0.10] + [0.10, 0.12, 0.08, 0.10]
    claims = _claims(0.10, 0.08)
    spec = _spec([4, 8])
    bare = witness.measure(spec, lambda a, s: a, _launch(saves), tmp_path, warmup=0)
    assert (_pairs(bare), bare.settled_by) == (4, "confirmed")  # without the margin it stops
    assert _judged(bare, claims)["cells"][DECODE]["status"] != "confirmed"  # ... unconfirmed
    stop = witness.stop_for(claims, [DECODE])
    assert stop.margin_s == pytest.approx(0.08)
    record = witness.measure(spec, lambda a, s: a, _launch(saves), tmp_path, warmup=0, stop=stop)
    assert (_pairs(record), record.stopped, record.settled_by) == (8, "", "")


@pytest.mark.parametrize(("saves", "claimed", "pairs", "settled_by", "status"), [
    # prints a 2 s saving, saves nothing: contradicted at 4 pairs, as the bot then judges it
    ([0.01, -0.01, 0.0, 0.01] + [0.0] * 8, 2.0, 4, "contradicted", "contradicted"),
    # claims 0.05 s, saves nothing, noise 0.1 s: neither confirmed nor contradicted at a look
    (list(np.random.default_rng(4).normal(0, 0.1, 12)), 0.05, 12, "", "unconfirmed"),
    # claims 0.5 s and saves it, steadily: confirmed at the first look
    ([0.5, 0.52, 0.48, 0.5] + [0.5] * 8, 0.5, 4, "confirmed", "confirmed"),
    # claims 0.66 s (0.58 decode, 0.08 prefill) and shows a steady 0.18 s: more than the
    # prefill's claim, but under half of all that is claimed, and the bot contradicts it
    ([0.18, 0.19, 0.17, 0.18] + [0.18] * 8, (0.58, 0.08), 4, "contradicted", "contradicted"),
])
def test_it_stops_where_the_bot_decides_and_not_before(tmp_path: Path, saves: list[float],
                                                        claimed: float | tuple[float, float],
                                                        pairs: int, settled_by: str,
                                                        status: str) -> None:
    claims = _claims(*claimed) if isinstance(claimed, tuple) else _claims(claimed, 0.0)
    record = witness.measure(_spec([4, 8, 12]), lambda a, s: a, _launch(saves), tmp_path,
                             warmup=0, stop=witness.stop_for(claims, [DECODE]))
    assert (_pairs(record), record.settled_by) == (pairs, settled_by)
    assert record.stopped == ("settled" if settled_by else "")
    assert record.to_dict().get("settled_by", "") == settled_by  # the results keep why
    assert _judged(record, claims)["cells"][DECODE]["status"] == status


def test_a_head_output_that_fails_verification_stops_it(tmp_path: Path) -> None:
    saves = [0.5] * 12
    claims = _claims(0.5, 0.0)
    record = witness.measure(_spec([4, 8, 12]), lambda a, s: a, _launch(saves, bad_output_at=1),
                             tmp_path, warmup=0, stop=witness.stop_for(claims, [DECODE]))
    # nothing more to learn: the witness cannot confirm, so it stops after the pair that
    # failed (the second), not at its first look (a head that times out would cost a timeout
    # a pair until then)
    assert (_pairs(record), record.stopped, record.settled_by) == (2, "settled", "failed")
    assert [s["verified"] for s in record.samples if s["side"] == "head"] == [True, False]
    assert _judged(record, claims)["cells"] == {}  # too few pairs to judge: never confirmed


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
    if _pairs(record) < 12:  # stopped early: the bot's judgement of it is decided, and why
        assert record.settled_by in statuses & {"confirmed", "contradicted"}, (saves, claims)
    else:  # the last look is the bot's to judge, not a stop
        assert (record.stopped, record.settled_by) == ("", "")


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
