"""Which witnesses run (engine/measure/witness_plan.py). `regression_decides`: none, where a cell
measured regressed and the policy REJECTs it (the end-to-end check is tests/test_demo_e2e.py,
`slow_long`). `narrower_cover` (a policy that lets a regression pass): a witness is skipped only
where every cell it would time is timed by narrower witnesses of its run, whose whole work is
some of those cells. A head cannot make a witness skip a cell it claims: the wider witness is
skipped only when its other cells left nothing to time (a regression), as the demo's
decode-1024 beside prefill-1024."""

from __future__ import annotations

from dataclasses import replace

import pytest

from evalbot.engine.contract.job import StoppingRule
from evalbot.engine.contract.witness_spec import WitnessSpec
from evalbot.engine.measure.witness_plan import narrower_cover, regression_decides
from evalbot.evaluation.profile import load_profile

D64, D1K, P1K = "tiny/decode@64", "tiny/decode@1024", "tiny/prefill@1024"


def spec(name: str, *cells: str) -> WitnessSpec:
    return WitnessSpec(name=name, argv=["w"], cells=dict.fromkeys(cells, 1), prompt_tokens=1,
                       output={"kind": "step_lines"}, output_tokens=1)


DECODE_64, PREFILL = spec("decode-64", D64), spec("prefill-1024", P1K)
DECODE_1K = spec("decode-1024", D1K, P1K)
DEMO = [DECODE_64, PREFILL, DECODE_1K]


@pytest.mark.parametrize(("wide", "to_time", "witnesses", "skipped"), [
    # slow_long: decode@1024 regressed, its prefill timed by prefill-1024 on its own work
    (DECODE_1K, [P1K], DEMO, True),
    # faster, neutral: decode@1024 has no other witness, so decode-1024 runs
    (DECODE_1K, [D1K, P1K], DEMO, False),
    (DECODE_1K, [D1K], DEMO, False),
    # the narrow witness is never skipped for a wider one that also times its cell
    (PREFILL, [P1K], DEMO, False),
    (DECODE_64, [D64], DEMO, False),
    # without prefill-1024, nothing else times the prefill
    (DECODE_1K, [P1K], [DECODE_64, DECODE_1K], False),
    # two witnesses of the same work: neither is narrower, both run
    (DECODE_1K, [D1K, P1K], [DECODE_1K, spec("twin", D1K, P1K)], False),
    # a narrower witness that also times a cell the wide one has nothing left to time of
    # (regressed) is not the cell's alone: it would not be run for it either way
    (DECODE_1K, [P1K], [spec("odd", P1K, D64), DECODE_1K], False),
])
def test_narrower_cover(wide, to_time, witnesses, skipped) -> None:
    assert narrower_cover(wide, to_time, witnesses) is skipped


def test_the_shipped_demo_witnesses_every_cell_with_a_narrow_prefill_witness() -> None:
    """The shipped shape the rule is for: decode-1024's work includes the prefill, which
    prefill-1024 times alone."""
    [run] = load_profile("demo").runs
    by_name = {w.name: w for w in run.witnesses}
    assert set(by_name["prefill-1024"].cells) < set(by_name["decode-1024"].cells)
    assert narrower_cover(by_name["decode-1024"], ["tiny/prefill@1024"], run.witnesses)


class Looked:
    """A cell's record as the plan reads it: its looks' decisions."""

    def __init__(self, *decisions: str) -> None:
        self.looks = [{"decision": d, "estimate": 0.0} for d in decisions]


RULE = StoppingRule(looks=[4], critical=[3.0], sd_floor=0.03, significance=0.3, tolerance=0.3,
                    witness_every_cell=True)


@pytest.mark.parametrize(("decisions", "rejects", "aa", "decides"), [
    (["regressed", "neutral"], True, False, True),
    # an improved cell beside it earns nothing: the REJECT stands whatever its witness says
    (["regressed", "improved"], True, False, True),
    (["neutral", "improved"], True, False, False),
    ([], True, False, False),
    # a policy that lets a regression pass: the witnesses may still earn a tier
    (["regressed", "improved"], False, False, False),
    # an A/A calibration measures every witness whatever the cells did
    (["regressed"], True, True, False),
])
def test_regression_decides(decisions, rejects, aa, decides) -> None:
    records = {f"m/decode@{i}": Looked(d) for i, d in enumerate(decisions)}
    rule = replace(RULE, regression_rejects=rejects, witness_aa=aa)
    assert regression_decides(records, rule) is decides


def test_a_cell_regressed_at_an_earlier_look_only_decides_nothing() -> None:
    records = {"m/decode@1": Looked("regressed", "neutral")}
    assert not regression_decides(records, replace(RULE, regression_rejects=True))
