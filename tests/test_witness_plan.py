"""Which witnesses run (engine/measure/witness_plan.py). `regression_decides`: none, where a cell
measured regressed and the policy REJECTs it (the end-to-end check is tests/test_demo_e2e.py,
`slow_long`). `narrower_cover` (a policy that lets a regression pass): a witness is skipped only
where every cell it would time is timed by narrower witnesses of its run, whose whole work is
some of those cells. A head cannot make a witness skip a cell it claims: the wider witness is
skipped only when its other cells left nothing to time (a regression), as the demo's
decode-1024 beside prefill-1024. `order` and `caps_headline`: witnesses timing unchanged cells
only run last, the least work first, and once one settles a cell not believed the rest of them are
not needed; a witness with an improved cell to time always runs (it may REJECT)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from evalbot.engine.contract.job import Cell, StoppingRule
from evalbot.engine.contract.witness_spec import WitnessSpec
from evalbot.engine.measure.witness_plan import caps_headline, narrower_cover, order, regression_decides
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
    """A cell's record as the plan reads it: its looks' decisions, and printed rates (tok/s)
    of main and the head, one pair."""

    def __init__(self, *decisions: str, base: float = 1000.0, head: float = 1000.0,
                 estimate: float = 0.0) -> None:
        self.cell = Cell("tiny", "decode", 64)
        self.looks = [{"decision": d, "estimate": estimate} for d in decisions]
        self.samples = [{"side": side, "value": rate, "dropped": False}
                        for side, rate in (("base", base), ("head", head))]


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


def _demo_specs() -> dict[str, WitnessSpec]:
    [run] = load_profile("demo").runs
    return {w.name: w for w in run.witnesses}


def _todo(records: dict[str, Looked]) -> list[tuple[None, WitnessSpec, list[str]]]:
    return [(None, w, [k for k in w.cells if k in records]) for w in _demo_specs().values()]


def test_unchanged_witnesses_run_last_the_least_work_first() -> None:
    """The hidden-slowdown head's shape: every cell unchanged. prefill-1024 (1024 ids at main's
    prefill rate: 0.2 s) is less work than decode-1024 (its 512 steps and the same prefill:
    0.93 s); decode-64's 128 steps at a main this slow are more (1.28 s)."""
    records = {D64: Looked("neutral", base=100.0), D1K: Looked("neutral", base=700.0),
               P1K: Looked("neutral", base=5000.0)}
    assert [w.name for _, w, _ in order(_todo(records), records, RULE)] == \
        ["prefill-1024", "decode-1024", "decode-64"]


def test_a_witness_with_a_gain_to_time_runs_first_whatever_its_work() -> None:
    records = {D64: Looked("neutral", base=900.0),
               D1K: Looked("improved", base=700.0, head=900.0, estimate=0.28),
               P1K: Looked("neutral", base=5000.0)}
    assert [w.name for _, w, _ in order(_todo(records), records, RULE)] == \
        ["decode-1024", "decode-64", "prefill-1024"]


@pytest.mark.parametrize(("settled_by", "decisions", "rule", "caps"), [
    ("slower", ["neutral"], RULE, True),
    ("slower", ["slower", "inconclusive"], RULE, True),
    # ruled out, or measured on to its last look: the grader decides, the others still run
    ("timed", ["neutral"], RULE, False),
    ("", ["neutral"], RULE, False),
    # an improved cell's witness may be contradicted later on: never a cap
    ("slower", ["neutral", "improved"], RULE, False),
    ("contradicted", ["improved"], RULE, False),
    # an A/A calibration measures every witness; a rule timing improved cells only has no cap
    ("slower", ["neutral"], replace(RULE, witness_aa=True), False),
    ("slower", ["neutral"], replace(RULE, witness_every_cell=False), False),
])
def test_caps_headline(settled_by, decisions, rule, caps) -> None:
    records = {f"m/decode@{i}": Looked(d) for i, d in enumerate(decisions)}
    assert caps_headline(settled_by, list(records), records, rule) is caps
