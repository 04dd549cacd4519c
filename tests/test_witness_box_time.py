"""The witnesses' box time (engine/measure/witness.py `Room`, `fits`): up to its first look a
witness may take what is left of the PR's budget (an honest witness always reaches the look the
bot can first judge it at), beyond it a share of the measuring's box time (the profile's
`speed.witness_share`). `fits` decides before every pair; the harness gives each witness its
room after all the measuring (engine/measure/speed.py, witness_plan.py). A witness cut there
confirms nothing it has not measured: a head cannot buy a tier by making the witness stop."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from evalbot.config.errors import ConfigError
from evalbot.engine.contract import witness_spec
from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.job import parse_job
from evalbot.engine.contract.results import validate
from evalbot.engine.harness.steps import run_job
from evalbot.engine.measure import speed, witness
from evalbot.evaluation.profile import load_profile
from evalbot.grading import confirmation
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.report.comment import CUT_BY_BOX_TIME, next_step
from evalbot.report.render import render_comment
from evalbot.service.witness_cut import cut_witnesses, witness_cut_cmd
from evalbot.store.jobs import Store
from tests.graded_history import record
from tests.stub_engine import _git, job_doc, make_repo, stepped_witness

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = load_labels(ROOT / "labels.yaml").policy("default")
DECODE = "m/decode@4096"
STEPS = 1000
TIERS = {"eval:XL", "eval:L", "eval:M", "eval:S", "eval:XS"}


def _samples(walls: list[float]) -> list[dict[str, Any]]:
    return [{"pair": i // 2, "side": "base" if i % 2 == 0 else "head", "wall_s": w}
            for i, w in enumerate(walls)]


R = witness.Room  # (first_look, budget_s: the PR's budget left, share_s: the witnesses' share)


@pytest.mark.parametrize(("walls", "kept", "room", "fits"), [
    # the first pair starts whenever any of the PR's budget is left, whatever the share ...
    ([], 0, R(3, 1.0, 0.0), True),
    ([], 0, R(3, 0.0, 100.0), False),  # ... and not once none is
    # before the first look: 10 s spent, the 2 pairs still to the look at 10 s each: 30 s of
    # the budget, whatever the share
    ([5, 5], 1, R(3, 30.0, 0.0), True),
    ([5, 5], 1, R(3, 29.9, 100.0), False),  # a witness that could not reach its look stops
    ([5, 5, 9, 9], 2, R(4, 64.0, 0.0), True),  # 28 s + 2 pairs at the last one's 18 s
    ([5, 5, 9, 9], 2, R(4, 63.9, 100.0), False),
    ([5, 5] * 2, 2, R(3, 30.0, 0.0), True),  # the look's last pair: 20 s + 10 s
    ([5, 5] * 2, 2, R(3, 29.9, 100.0), False),
    # a dropped pair's processes took box time too: 3 pairs run, 2 kept, 1 to the look
    ([5, 5] * 3, 2, R(3, 40.0, 0.0), True),
    ([5, 5] * 3, 2, R(3, 39.9, 100.0), False),
    ([5, None, 5, 5], 2, R(3, 25.0, 0.0), True),  # a process that did not start: 0 s
    ([5, None, 5, 5], 2, R(3, 24.9, 100.0), False),
    # from the first look on: one more pair, within the share and within the budget
    ([5, 5] * 3, 3, R(3, 100.0, 40.0), True),
    ([5, 5] * 3, 3, R(3, 100.0, 39.9), False),  # the share bounds it ...
    ([5, 5] * 3, 3, R(3, 40.0, 100.0), True),
    ([5, 5] * 3, 3, R(3, 39.9, 100.0), False),  # ... and so does what is left of the budget
    ([5, 5, 9, 9], 2, R(2, 100.0, 46.0), True),  # the next pair costs what the last one did
    ([5, 5, 9, 9], 2, R(2, 100.0, 45.9), False),
])
def test_fits_table(walls, kept, room, fits) -> None:
    assert witness.fits(_samples(walls), kept, room) is fits


def _spec(looks: list[int]) -> witness_spec.WitnessSpec:
    return confirmation.with_stops(witness_spec.parse_witness(
        {"name": "w", "argv": ["x"], "cells": {DECODE: STEPS}, "prompt_tokens": 4,
         "steps": STEPS, "output": {"kind": "step_lines"}, "output_tokens": STEPS + 1,
         "clock": "handoff", "pairs": looks}, "w", {DECODE}), 0.01)


MAINS = "".join(f"{witness_spec.STEP}{i % 1000}\n" for i in range(STEPS + 1))


def _launch(head_s: float, wall_s: float) -> witness.Launch:
    def launch(side: str, argv: list[str], timeout_s: float, prompt: list[int]) -> witness.Timed:
        return witness.Timed(True, MAINS, 10.0 if side == "base" else head_s, False,
                             wall_s=wall_s)
    return launch


def _measure(looks: list[int], room: witness.Room, tmp_path: Path, head_s: float = 10.0,
             stop: witness.Stop | None = None) -> witness.WitnessRecord:
    """12 s of box time a process; main's witness takes 10 s by its clock, the head's head_s."""
    return witness.measure(_spec(looks), lambda a, s: a, _launch(head_s, 12.0), tmp_path,
                           warmup=0, stop=stop, room=room)


@pytest.mark.parametrize(("room", "pairs"), [
    # 12 s a process, 24 s a pair; the first look (4 pairs, 96 s) fits in the PR's budget
    # though the share holds none: it is reached, and no pair is taken after it
    (R(4, 1000.0, 0.0), 4),
    # a share of 130 s: 96 s, then a fifth pair (120 s), not a sixth (144 s)
    (R(4, 1000.0, 130.0), 5),
    (R(4, 1000.0, 119.9), 4),
    # the budget left bounds the pairs after the look too: 110 s, no fifth pair
    (R(4, 110.0, 1000.0), 4),
    # a budget that cannot reach the first look: one pair (it tells the cost), then no more
    (R(4, 95.9, 1000.0), 1),
    (R(4, 0.0, 1000.0), 0),  # nothing left: not run at all
])
def test_the_witness_stops_before_the_pair_that_would_not_fit(tmp_path: Path, room, pairs) -> None:
    record = _measure([4, 8], room, tmp_path)  # no saving: it never settles at a look
    assert (record.stopped, record.settled_by, len(record.samples) // 2) == ("box_time", "",
                                                                            pairs)
    doc = record.to_dict()
    assert (doc["first_look"], doc["budget_s"], doc["allowance_s"]) == (4, room.budget_s,
                                                                       room.share_s)
    spent = sum(s["wall_s"] for s in doc["samples"])
    if pairs > 4:  # past its first look: within the share and the budget left
        assert spent <= min(room.share_s, room.budget_s)
    elif pairs == 4:  # its first look: within the budget left, whatever the share
        assert spent <= room.budget_s


def test_a_witness_settled_at_its_first_look_takes_no_more(tmp_path: Path) -> None:
    # a 2 s saving in a 10 s witness with no noise: confirmed at 4 pairs, with room for 8
    record = _measure([4, 8], R(4, 1000.0, 1000.0), tmp_path, 8.0, witness.Stop(0.0, 2.0))
    assert (record.stopped, record.settled_by, len(record.samples) // 2) == ("settled",
                                                                            "confirmed", 4)


def test_a_lie_cut_by_the_box_time_stays_without_a_tier(tmp_path: Path) -> None:
    # the head claims 2 s of the witness's 10 and saves none; the PR's budget left (60 s)
    # cannot reach the first look (3 pairs, 72 s): one pair, which the bot does not judge
    # (fewer than MIN_PAIRS), so the claim is unconfirmed, never confirmed
    record = _measure([3, 5], R(3, 60.0, 1000.0), tmp_path)
    assert (record.stopped, len(record.samples) // 2) == ("box_time", 1)
    judged = confirmation.judge(record.to_dict(), {DECODE: (2.0, 10.0)},
                                confirmation.confirm_alpha(0.05, 1))
    assert judged["stopped"] == "box_time" and judged["cells"] == {}


def test_the_comment_says_the_box_time_cut_the_witness() -> None:
    verdict = {"kind": "unconfirmed", "witnesses": [{"name": "w", "stopped": "box_time"}]}
    assert next_step(verdict) == CUT_BY_BOX_TIME
    assert next_step({**verdict, "witnesses": [{"stopped": "settled"}]}) != CUT_BY_BOX_TIME


# ---- through the harness, on the stub engine -------------------------------------------------

@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, str]]:
    """main; an honest 2x decode; and a head whose bench decodes 2x (its samples' wall times
    agree) while the work its witness times is main's: a bench-only speedup."""
    repo, main, shas = make_repo(tmp_path_factory.mktemp("stub"),
                                 {"honest": {"decode": 800.0}}, main={"decode": 400.0})
    _git(repo, "checkout", "-q", "--detach", main)
    engine = (repo / "engine.py").read_text()
    old = 'witness(1 / cfg["decode"]'
    assert engine.count(old) == 1
    (repo / "engine.py").write_text(engine.replace(old, 'witness(1 / cfg["witness_decode"]'))
    (repo / "speed.json").write_text(json.dumps({"decode": 800.0, "witness_decode": 400.0,
                                                 "prefill": 1e6}))
    _git(repo, "commit", "-q", "-am", "bench only")
    shas["bench_only"] = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "main")
    return repo, main, shas


def _evaluate(stub: tuple[Path, str, dict[str, str]], head: str, share: float | None, out: Path,
              ctxs: tuple[int, ...] = (128,)) -> tuple[dict[str, Any], dict[str, Any]]:
    """The stub's decode cells at `ctxs`, each with its own stepped witness, through the real
    harness and grading; with the bot's critical values per look, as evalbot's job carries
    them, so the harness may stop at the first look where the bot's judgement is decided."""
    repo, main, shas = stub
    keys = {f"m/decode@{ctx}" for ctx in ctxs}
    witnesses = []
    for ctx in ctxs:
        w = stepped_witness(f"decode-{ctx}", f"m/decode@{ctx}", 256, [4, 8])
        spec = confirmation.with_stops(witness_spec.parse_witness(w, "w", keys), 0.05)
        witnesses.append({**w, "stop_t": list(spec.stop_t), "spoof_t": list(spec.spoof_t)})
    cells = [("decode", ctx) for ctx in ctxs] if len(ctxs) > 1 else None
    doc = job_doc(repo, main, shas[head], cells=cells, witnesses=witnesses)
    if share is not None:
        doc["rule"]["witness_share"] = share  # type: ignore[index]
    results = validate(run_job(parse_job(doc), out))
    return results, grade(json.loads(json.dumps(results)), DEFAULT)


def _timed(results: dict[str, Any]) -> dict[str, Any]:
    [timed] = [w for w in results["witnesses"] if w["source"] == "witness"]
    return timed


@pytest.fixture(scope="module")
def honest_at_a_small_share(stub, tmp_path_factory) -> tuple[dict[str, Any], dict[str, Any]]:
    """The honest head with a witness share of 0.01: confirmed, with its tier. Evaluated once
    (tens of seconds of stub witnesses under load) for the two tests that read it; each gets a
    copy."""
    return _evaluate(stub, "honest", 0.01, tmp_path_factory.mktemp("honest-small-share"))


def test_an_honest_witness_reaches_its_first_look_beyond_its_share(
        honest_at_a_small_share) -> None:
    # the stub's samples are tiny next to its witness: 0.01 of them holds less than one
    # witness pair, yet the PR's budget (600 s) holds the first look's 4, and a real 2x decode
    # is confirmed there
    results, verdict = copy.deepcopy(honest_at_a_small_share)
    timed = _timed(results)
    first_pair = sum(s["wall_s"] for s in timed["samples"] if s["pair"] == 0)
    spent = sum(s["wall_s"] for s in timed["samples"])
    assert timed["allowance_s"] < first_pair and spent <= timed["budget_s"]
    assert (timed["first_look"], len(timed["samples"])) == (4, 8)
    assert (timed["stopped"], timed["settled_by"]) == ("settled", "confirmed")
    decode = next(c for c in verdict["cells"] if c["metric"] == "decode")
    assert decode["decision"] == "improved" and verdict["tier"] is not None


def test_a_measuring_that_spent_its_budget_leaves_the_first_look_its_part(
        stub, tmp_path, monkeypatch) -> None:
    # the measuring ran to its own deadline (a noisy cell that never decided): the witnesses'
    # part of the PR's budget (witness_share x budget_s) still holds the honest first look
    measure_all = speed.Measurement._witness_all

    def witness_all(self: speed.Measurement) -> None:
        deadline = self.deadline
        self.now = lambda: deadline  # type: ignore[method-assign]
        measure_all(self)

    monkeypatch.setattr(speed.Measurement, "_witness_all", witness_all)
    results, verdict = _evaluate(stub, "honest", 0.5, tmp_path)
    timed = _timed(results)
    assert timed["budget_s"] == pytest.approx(0.5 * 600.0)
    assert (timed["stopped"], timed["settled_by"]) == ("settled", "confirmed")
    assert verdict["tier"] is not None


def _budget_left_at_witnesses(monkeypatch: pytest.MonkeyPatch, left_s: float) -> None:
    """A box where all but `left_s` of the PR's whole budget (the measuring's and the
    witnesses' part of it) is spent: the budget's clock (Measurement.now) stands there once
    the witnesses start."""
    measure_all = speed.Measurement._witness_all

    def witness_all(self: speed.Measurement) -> None:
        rule = self.job.rule
        # the witnesses' part follows the budget as extended (witness_plan.room)
        end = self.deadline + rule.witness_share * (self.deadline - self.start)
        # none left means none: a float's rounding must not leave the first pair 1e-13 s
        self.now = lambda: end - left_s + (1e-6 if left_s == 0 else 0.0)  # type: ignore[method-assign]
        measure_all(self)

    monkeypatch.setattr(speed.Measurement, "_witness_all", witness_all)


@pytest.mark.parametrize(("left_s", "pairs", "why"), [
    (0.0, 0, "its witness `decode-128` was not run: no box time was left for it"),
    (0.001, 1, "reached 1 of its 4 pairs (`decode-128`, stopped for box time)"),
])
def test_a_lie_cut_for_box_time_through_the_harness_gets_no_tier(
        stub, tmp_path, monkeypatch, left_s, pairs, why) -> None:
    # the bench-only head's decode measures 2x and its samples' wall times agree, so only the
    # witness could deny it; the PR's budget is spent before the witness's first look
    _budget_left_at_witnesses(monkeypatch, left_s)
    results, verdict = _evaluate(stub, "bench_only", 10.0, tmp_path)
    timed = _timed(results)
    assert (timed["stopped"], timed["budget_s"], len(timed["samples"]) // 2) == (
        "box_time", left_s, pairs)
    decode = next(c for c in verdict["cells"] if c["metric"] == "decode")
    assert decode["decision"] == "unconfirmed"
    assert verdict["tier"] is None and verdict["headline"] not in TIERS
    assert why in render_comment(verdict, results=results)
    assert cut_witnesses(verdict, results) == ["decode @ 128"]  # as the table names it


def test_the_rollout_lists_verdicts_without_a_tier_only_for_a_cut_witness(
        stub, honest_at_a_small_share, tmp_path, monkeypatch) -> None:
    # `evalbot witness-cut` over a real store: a lie whose witness was cut (listed: a longer
    # witness would judge it) beside an honest confirmed head (it has its tier: not listed)
    honest = copy.deepcopy(honest_at_a_small_share)
    assert honest[1]["tier"] is not None
    _budget_left_at_witnesses(monkeypatch, 0.0)
    cut = _evaluate(stub, "bench_only", 10.0, tmp_path / "cut")
    assert cut_witnesses(honest[1], honest[0]) == []
    store = Store(tmp_path / "jobs.sqlite3")
    repo, main, shas = stub
    record(store, "acme/engine", 1, main, shas["honest"], *honest)
    record(store, "acme/engine", 2, main, shas["bench_only"], *cut)
    config = tmp_path / "evalbot.yaml"
    config.write_text(f"profile: demo\nstore: {store.path}\n"
                      f"boxes:\n  - {{name: a, kind: local, workdir: {tmp_path / 'w'}}}\n")
    done = CliRunner().invoke(witness_cut_cmd, ["--config", str(config)])
    assert done.exit_code == 0, done.output
    assert f"PR #2 {shas['bench_only'][:12]}" in done.output and "PR #1" not in done.output
    assert f"evalbot rerun {shas['bench_only']}" in done.output
    assert "1 of 2 verdict(s)" in done.output


@pytest.mark.parametrize("share", [0, -0.1, 11, True])
def test_a_share_out_of_range_is_named(share, tmp_path) -> None:
    repo = tmp_path
    doc = job_doc(repo, "a" * 40, "b" * 40)
    doc["rule"]["witness_share"] = share  # type: ignore[index]
    with pytest.raises(ContractError, match="witness_share"):
        parse_job(doc)
    text = (ROOT / "evalbot" / "profiles" / "demo.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(re.sub(r"(?m)^  witness_share: .*$", f"  witness_share: {share}", text, count=1))
    with pytest.raises(ConfigError, match="witness_share"):
        load_profile(str(bad))


def test_the_shipped_profiles_bound_the_witnesses_box_time() -> None:
    # a half on llamacpp's GPU box (docs/trust.md), whose three witnesses time every cell both
    # ways (each to its last look: 435 s of processes on the H200 against the 930 s budget's
    # half); one and a half on sparkinfer's, whose eleven witnesses time every covered cell both ways
    # (issue 53: an A/A's take about its measuring's time, docs/statistics.md section 9); four
    # for the demo's toy samples, whose three witnesses (every cell) need their second look
    # beside ~8 s of measuring (evalbot/profiles/demo.yaml)
    shares = {name: load_profile(name).speed.witness_share
              for name in ("demo", "llamacpp", "sparkinfer")}
    assert shares == {"demo": 4.0, "llamacpp": 0.5, "sparkinfer": 1.5}


def test_every_improved_cell_is_witnessed_after_a_confirmation(stub, tmp_path) -> None:
    # two faster decode cells, each with its own witness: a confirmed tier no longer skips the
    # other witness (issue 53: a cell whose gain the harness did not time is not believed)
    results, verdict = _evaluate(stub, "honest", None, tmp_path, ctxs=(128, 512))
    ran = [w for w in results["witnesses"] if w["source"] == "witness"]
    assert [w["settled_by"] for w in ran] == ["confirmed", "confirmed"]
    assert verdict["kind"] == "improved" and verdict["tier"] is not None
    assert {c["decision"] for c in verdict["cells"]} == {"improved"}
    assert cut_witnesses(verdict, results) == []


def test_a_witness_that_could_not_change_the_verdict_is_not_run(stub, tmp_path) -> None:
    # refuted printed rates (REJECT) settle the verdict: the other witness costs no box time
    results, verdict = _evaluate(stub, "bench_only", None, tmp_path, ctxs=(128, 512))
    ran, skipped = sorted((w for w in results["witnesses"] if w["source"] == "witness"),
                          key=lambda w: w["stopped"] == "not_needed")
    assert (ran["settled_by"], skipped["stopped"], skipped["samples"]) == ("contradicted",
                                                                            "not_needed", [])
    assert verdict["kind"] == "spoofed"
    assert cut_witnesses(verdict, results) == []


@pytest.mark.parametrize("every_cell, measured_s, budget_s, share_s", [
    (False, 14.0, 233.0, 1.5 * 14.0),  # the improved cells' witnesses: a share of what measuring spent
    (True, 14.0, 233.0, 1.5 * 233.0),  # every covered cell timed: a share of the measuring's budget
    (True, 400.0, 233.0, 1.5 * 400.0),  # a measuring that ran past its budget (extended) keeps it
])
def test_the_witnesses_share_under_both_ways_follows_the_measuring_s_budget(
        every_cell: bool, measured_s: float, budget_s: float, share_s: float) -> None:
    """GPU run 53: sparkinfer's steady measuring decided at 2 pairs in 14 s, and a share of that
    cut every witness of its A/A at its first look (docs/gpu-e2e.md); where the witnesses are the
    measurement of every unchanged cell they get their share of the budget instead."""
    from evalbot.engine.contract.rule import StoppingRule
    from evalbot.engine.measure import witness_plan

    rule = StoppingRule(looks=[2, 5], critical=[3.0, 2.0], sd_floor=0.01, significance=0.02,
                        tolerance=0.02, witness_share=1.5, witness_every_cell=every_cell)
    spec: Any = SimpleNamespace(looks=(3, 6))  # the room reads only the witness's first look
    room = witness_plan.room(spec, rule, budget_left_s=0.0, budget_s=budget_s,
                             measured_s=measured_s, witnessed_s=10.0)
    assert room is not None and room.share_s == pytest.approx(share_s - 10.0)
