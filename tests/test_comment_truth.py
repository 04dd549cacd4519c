"""Every sentence of the comment's first lines is true of its own verdict (issue 48, point 3).

A table of verdicts, one per kind and reason, each graded for real from results as the harness
records them (tests/test_grading.py's factory, the real GPU results under tests/data/, the
witness records as the harness would have written them): undecided by noise, not confirmed for
each reason (no witness, cut for box time, not run, no saving shown, a saving within its noise,
the PR's witness output rejected, a stale floor, the run's wall times), spoofed, each guard
outcome, infra-error, and a PR whose printed rates the harness's clock refused. Each is rendered
by `render_comment`, and its headline, its ⚖️/❓ lines and its Next line are checked against the
verdict's fields, not against stored text: a sentence that stops being true of its verdict fails.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from evalbot.config.settings import REPO_ROOT
from evalbot.evaluation.evaluate import failure_verdict
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.report.decisions import UNCONFIRMED_MARK, UNDECIDED_MARK
from evalbot.report.numbers import interval, pct
from evalbot.report.publication import public_verdict
from evalbot.report.render import render_comment
from evalbot.report.unconfirmed import cell_name
from tests import test_comment_unconfirmed as unc
from tests import test_labels_headline as guards
from tests import test_wall_time_contradiction as wall
from tests.comment_fixtures import demo_results, gpu_verdicts
from tests.test_grading import DEFAULT, C, Doc, results

Case = Callable[[], tuple[dict[str, Any], dict[str, Any] | None]]
MEASURES_AGAIN = ("`/evalbot rerun`", "`/evalbot measure-more`")
NO_CHANGE_ON_REPUSH = "re-pushing the same code does not change this verdict"
HEADLINE_OF_KIND = {"improved": "Faster (", "regressed": "Slower (", "neutral": "No speed change",
                    "inconclusive": "Not decided: ", "incorrect": "Rejected: the PR changes",
                    "spoofed": "Rejected: the speed", "infra-error": "Not judged, not the PR's"}


def graded(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return grade(doc, DEFAULT), doc


def wide_noise() -> tuple[dict[str, Any], dict[str, Any]]:
    """The issue's guide verdict: a row that moved about +50% with a very wide interval."""
    return graded(results(Doc([C("m", "decode", 64, 1.52, noise=0.45),
                               C("m", "prefill", 64, 1.0)])))


def floor_stale(w: dict[str, Any]) -> None:
    w["samples"], w["stopped"] = [], "floor_stale"


def unmeasured() -> tuple[dict[str, Any], dict[str, Any]]:
    doc = results(Doc([C("m", "decode", 128, 1.0), C("m", "decode", 4096, 1.0, pairs=0)]))
    return graded(doc)


def printed_rates_refused() -> tuple[dict[str, Any], dict[str, Any]]:
    """The GPU run of the issue: a PR printing prefill x1.10 the harness's clock refused."""
    doc = results(Doc([C("m", "prefill", 4096, 1.10)]))
    doc["failures"] = [{"stage": "speed", "side": "head", "attribution": "pr", "kind": "spoofed",
                        "message": "rates imply 0.5743 s of work in a 0.5000 s process",
                        "log_tail": ""}]
    return graded(doc)


def guard(scored: str, guarded: str) -> Case:
    return lambda: (guards._graded(scored, guarded, "L", "none"), None)


def box_did_not_answer() -> tuple[dict[str, Any], None]:
    class Job:
        id, base_sha, head_sha = "j1", "a" * 40, "b" * 40
    policy = load_labels(REPO_ROOT / "labels.yaml").policy("default")
    return failure_verdict(Job(), policy, "demo", "the box did not answer"), None


CASES: dict[str, Case] = {
    "improved, tiered on a wide interval": lambda: graded(demo_results("faster")),
    "improved, one cell without a witness": lambda: graded(unc.real(unc.FA_OFF)),
    "regressed": lambda: (gpu_verdicts()["slow"], None),
    "neutral": lambda: graded(results(Doc([C("m", "decode", 128, 1.0)]))),
    "incorrect": lambda: (gpu_verdicts()["broken"], None),
    "undecided by noise, the GPU A/A": lambda: graded(unc.real("llamacpp/h200-aa.results.json")),
    "undecided by noise, moved +50%": wide_noise,
    "undecided and a cell the budget never reached": lambda: graded(unc.undecided_and_unmeasured()),
    "not confirmed: no witness, cut for box time": lambda: graded(unc.issue_h200()),
    "not confirmed: cut for box time, from the verdict alone": lambda: (
        grade(unc.issue_h200(), DEFAULT), None),
    "not confirmed: witness cut after one pair": lambda: graded(unc.fa_off(unc.cut_after_one_pair)),
    "not confirmed: witness not run": lambda: graded(unc.fa_off(unc.never_run)),
    "not confirmed: a saving within its noise": lambda: graded(unc.fa_off(unc.noisy_saving)),
    "not confirmed: no saving shown": lambda: graded(unc.fa_off(unc.no_saving)),
    "not confirmed: the PR's witness output rejected": lambda: graded(
        unc.fa_off(unc.head_output_rejected)),
    "not confirmed: the witness's floor is stale": lambda: graded(unc.fa_off(floor_stale)),
    "not confirmed: the run's wall times alone": lambda: (wall._graded(1.12), None),
    "spoofed: a real witness contradicts": lambda: (
        wall._graded(1.12, wall._real_witness(12.0)), None),
    "spoofed: the H200 sparkinfer run": lambda: graded(
        unc.real("sparkinfer/phase2-speedup-h200.results.json")),
    "guard rejects, the scored model passes": guard("pass", "reject"),
    "guard undecided": guard("pass", "inconclusive"),
    "guard reference unusable": guard("pass", "infra-error"),
    "scored model rejects, guard passes": guard("reject", "pass"),
    "infra-error: a cell never measured": unmeasured,
    "infra-error: the box did not answer": box_did_not_answer,
    "the harness's clock refused the printed rates": printed_rates_refused,
}


def first_lines(text: str) -> list[str]:
    return [line.removesuffix("\\") for line in text.split("\n\n", 1)[0].splitlines()[1:]]


def measured(verdict: dict[str, Any], decision: str) -> list[dict[str, Any]]:
    return [c for c in verdict["cells"] if c["decision"] == decision and c["pairs"] > 0]


def check_undecided_lines(verdict: dict[str, Any], lines: list[str]) -> None:
    """One ⚖️ line names each undecided cell, with its own interval; "the noise is wide" exactly
    where its interval holds 0 and is wider than the band; never the old "moved less than"."""
    rule = verdict["provenance"]["rule"]
    many = len({c["model"] for c in verdict["cells"]}) > 1
    marked = [line for line in lines if line.startswith(UNDECIDED_MARK)]
    cells = measured(verdict, "inconclusive") if verdict["kind"] == "inconclusive" else []
    assert len(marked) == len(cells)
    for cell, line in zip(cells, marked, strict=True):
        assert line.startswith(f"{UNDECIDED_MARK} {cell_name(cell, many)}: undecided: ")
        assert interval(cell["lo"], cell["hi"]) in line and f"after {cell['pairs']} pairs" in line
        wide = cell["lo"] <= 0 <= cell["hi"] and \
            cell["hi"] - cell["lo"] > rule["significance"] + rule["tolerance"]
        assert ("the noise is wide" in line) == wide, line


def check_unconfirmed_lines(verdict: dict[str, Any], results: dict[str, Any] | None,
                            lines: list[str]) -> None:
    """Each unconfirmed cell is named on a ❓ line; "evalbot's own timed run" only where a
    witness the harness owns timed at least one process; a cut only where one was cut."""
    marked = [line for line in lines if line.startswith(UNCONFIRMED_MARK)]
    shown = " ".join(marked)
    many = len({c["model"] for c in verdict["cells"]}) > 1
    if verdict["kind"] not in ("improved", "neutral", "inconclusive", "unconfirmed"):
        assert marked == []  # a rejection is its own answer
        return
    for cell in measured(verdict, "unconfirmed"):
        assert cell_name(cell, many) in shown
    owned = [w for w in (results or {}).get("witnesses") or verdict.get("witnesses") or []
             if w.get("source", "witness") == "witness"]
    timed = any(w.get("samples") or w.get("pairs") for w in owned)
    assert ("evalbot's own timed run" in shown) <= timed, shown
    assert ("stopped for box time" in shown or "no box time" in shown) <= \
        any(w.get("stopped") == "box_time" for w in owned)
    assert ("stale" in shown) == any(w.get("stopped") == "floor_stale" for w in owned)
    no_witness = [c for c in measured(verdict, "unconfirmed")
                  if not any(c["key"] in (w.get("cells") or {}) for w in owned)
                  and c.get("confirmation") != "contradicted by wall times"]
    assert ("no witness covers" in shown) == bool(no_witness) or results is None


def check_next(verdict: dict[str, Any], top: list[str]) -> None:
    """Next never says re-pushing changes nothing beside a step that measures again, and
    names the step for what keeps the verdict open."""
    nxt = top[-1]
    assert nxt.startswith("**Next:** ")
    if NO_CHANGE_ON_REPUSH in nxt:
        assert not any(word in "\n".join(top) for word in MEASURES_AGAIN), nxt
    if verdict["kind"] == "inconclusive":
        assert "nothing to do" not in nxt
        if measured(verdict, "inconclusive"):
            assert "`/evalbot measure-more`" in nxt and UNDECIDED_MARK in nxt
        if any(c["pairs"] <= 0 for c in verdict["cells"]):
            assert "`speed.budget_s`" in nxt
    if verdict["kind"] == "incorrect":
        assert ("guard model" in nxt) == ("guard model" in top[0])
    if verdict["kind"] == "infra-error" and not verdict["failures"]:
        assert top[0].split("fault: ", 1)[1] in nxt  # the same reason, not "the box failed"
    if verdict["kind"] == "improved" and not measured(verdict, "unconfirmed"):
        assert nxt == "**Next:** nothing to do: it is faster and computes the same model."


def check_headline(verdict: dict[str, Any], top: list[str]) -> None:
    head = top[0]
    if verdict["failures"]:
        refused = verdict["failures"][0]["kind"] == "spoofed"
        assert ("Rejected by the harness's clock" in head) == refused, head
        assert ("Not measured" in head) != refused, head
        return
    assert HEADLINE_OF_KIND[verdict["kind"]] in head, head
    guards_ = verdict.get("correctness_guards") or []
    if verdict["kind"] == "incorrect":
        scored = verdict["correctness"]["decision"] == "reject"
        assert ("guard model" in head) != scored and ("top-1 agreement" in head) == scored
    if verdict["kind"] == "improved":
        best = next(c for c in verdict["cells"] if c["key"] == verdict["best_cell"])
        assert f"`{verdict['headline']}`, at least {pct(best['lo'])}" in top[1]
        assert best["lo"] > 0
    if verdict["kind"] == "inconclusive":
        assert ("not confirmed" in head) == bool(measured(verdict, "unconfirmed"))
        assert ("undecided within" in head) == bool(measured(verdict, "inconclusive"))
        undecided_guard = any(g["decision"] == "inconclusive" for g in guards_)
        assert ("correctness" in head) == (
            verdict["correctness"]["decision"] == "inconclusive" or undecided_guard)
    if verdict["kind"] == "infra-error":
        unusable = any(g["decision"] == "infra-error" for g in guards_)
        assert ("guard model" in head) == unusable
        assert ("got no measurement" in head) == any(c["pairs"] <= 0 for c in verdict["cells"])


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_first_line_is_true_of_its_verdict(case: str) -> None:
    verdict, doc = CASES[case]()
    text = render_comment(verdict, results=doc)
    shown = public_verdict(verdict)  # the comment renders what may be published
    top = first_lines(text)
    check_headline(shown, top)
    check_next(shown, top)
    if not shown["failures"]:
        check_undecided_lines(shown, top)
        check_unconfirmed_lines(shown, doc, top)
    assert "moved less than" not in text and "❔" not in text
    assert not re.search(r"only [−-]\d", text)  # no "ran only -74.3 ms shorter"


def test_the_table_covers_every_kind_and_reason() -> None:
    """The control: the cases reach every verdict kind, both marks and each reason's words."""
    seen = {name: CASES[name]() for name in CASES}
    kinds = {v["kind"] for v, _ in seen.values()}
    assert kinds >= set(HEADLINE_OF_KIND)
    texts = "\n".join(render_comment(v, results=d) for v, d in seen.values())
    for words in ("the noise is wide", "no witness covers", "stopped for box time",
                  "no box time was left", "within its noise", "longer than main's",
                  "did not agree with main's", "witness floor stale",
                  "the harness's clock does not show the saving",
                  "Rejected by the harness's clock", "the guard model `q36`",
                  "correctness of `q36` undecided", "got no measurement",
                  UNDECIDED_MARK, UNCONFIRMED_MARK, "at least +"):
        assert words in texts, words


def test_a_wide_undecided_row_is_said_to_be_noisy_not_small() -> None:
    verdict, doc = wide_noise()
    cell = measured(verdict, "inconclusive")[0]
    assert cell["speedup"] > 0.3 and cell["lo"] < 0  # the premise: moved a lot, still undecided
    top = first_lines(render_comment(verdict, results=doc))
    assert any(line.startswith(f"{UNDECIDED_MARK} decode @ 64: undecided: the noise is wide")
               for line in top)
