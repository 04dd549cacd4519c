"""The comment's first lines say why a cell that measured faster got no tier, whose action can
change that, and a headline that agrees with its counts (issue 29, part 4).

Real results (tests/data/), some with their witness record changed the way the harness would have
written it (cut for box time, never run, noisy, a failed PR output), and a results document
shaped as the issue's H200 evaluation: sparkinfer's Qwythos, four decode cells +9%, three
prefill cells unchanged, its `decode-2176` witness stopped for box time after 1 usable pair of
the 4 of its first look. Each is graded by the real `grade` and rendered by `render_comment`.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalbot.grading.grade import grade
from evalbot.report.render import render_comment
from tests.comment_fixtures import DEMO, demo_results, gpu_verdicts
from tests.test_grading import DEFAULT, C, Doc, results

DATA = Path(__file__).parent / "data"
FA_OFF = "llamacpp/h200-speedup-witness-fa-off.results.json"
LLAMACPP_WITNESS = "prefill-4k-decode-896"
QWYTHOS = "qwythos-9b"
BOX_LEVERS = ("raise `speed.witness_share` (now 0.25) or `speed.budget_s` (now {budget} s) in "
              "the profile for `{name}`, or comment `/evalbot rerun`")
NOTHING = "nothing in the PR; re-pushing the same code does not change this verdict"
NOTHING_TO_CHANGE = "nothing in the PR"  # beside a maintainer's step that measures again
MEASURE_MORE = ("comment `/evalbot measure-more` (more pairs, pooled with these) or `/evalbot "
                "rerun` to measure the ⚖️ rows again")
# The llamacpp H200 run's prefill@0: +52%-style wide noise, never "moved less than it resolves"
FA_OFF_UNDECIDED = ("⚖️ prefill @ 0: undecided: the noise is wide (after 16 pairs its interval "
                    "[−9.7%, +11.4%] holds both no change and a change past ±2%)")
NO_WITNESS_DECODE_0 = "❓ decode @ 0: faster, not confirmed: no witness covers this cell (decode@0)"


def first_lines(text: str) -> list[str]:
    """Headline, counts, the why lines and Next: the lines before the first blank one."""
    shown = text.split("\n\n", 1)[0].splitlines()[1:]
    return [line.removesuffix("\\") for line in shown]


def rendered(doc: dict[str, Any], with_results: bool = True) -> tuple[dict[str, Any], str]:
    verdict = grade(copy.deepcopy(doc), DEFAULT)
    return verdict, render_comment(verdict, results=doc if with_results else None)


def real(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


# ---- the witness record as the harness would have written it --------------------------------

def fa_off(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """The H200 llamacpp run whose witness confirmed decode@4k, its witness record changed."""
    doc = real(FA_OFF)
    change(next(w for w in doc["witnesses"] if w["name"] == LLAMACPP_WITNESS))
    return doc


def cut_after_one_pair(w: dict[str, Any]) -> None:
    w["samples"], w["stopped"] = w["samples"][:2], "box_time"


def never_run(w: dict[str, Any]) -> None:
    w["samples"], w["stopped"] = [], "box_time"


def _head_by(w: dict[str, Any], saving_s: float, wobble_s: float) -> None:
    """The PR's processes `saving_s` faster than main's of the same pair, ± `wobble_s`."""
    base = {s["pair"]: s["seconds"] for s in w["samples"] if s["side"] == "base"}
    for s in w["samples"]:
        if s["side"] == "head":
            wobble = wobble_s if s["pair"] % 2 else -wobble_s
            s["seconds"] = round(base[s["pair"]] - saving_s + wobble, 4)
    w["stopped"] = ""


def noisy_saving(w: dict[str, Any]) -> None:
    _head_by(w, 0.2, 0.5)  # most of the 0.42 s claimed, too unsteady to be sure of any


def no_saving(w: dict[str, Any]) -> None:
    _head_by(w, -0.2, 0.5)  # none seen: too unsteady to contradict the claim either


def head_output_rejected(w: dict[str, Any]) -> None:
    for s in w["samples"]:
        if s["side"] == "head" and s["pair"] == 1:
            s["verified"] = False


# ---- the issue's H200 evaluation -------------------------------------------------------------

def witness_samples(pairs: list[tuple[float, float]]) -> list[dict[str, Any]]:
    out = []
    for p, (base_s, head_s) in enumerate(pairs):
        out += [{"pair": p, "side": side, "seconds": s, "wall_s": s + 9.0, "dropped": False,
                 "verified": True, "agreement": 1.0, "error": ""}
                for side, s in (("base", base_s), ("head", head_s))]
    return out


def qwythos(decode: float, witness: list[tuple[float, float]], stopped: str) -> dict[str, Any]:
    """Four decode cells at `decode` x main, three prefill cells unchanged; `decode-2176` covers
    decode@128 (2176 tokens: 21.8 s of main's 100 tok/s) with looks at 4 and 8 pairs."""
    cells = [C(QWYTHOS, "decode", x, decode) for x in (128, 4096, 32768, 65536)]
    cells += [C(QWYTHOS, "prefill", x, 1.0) for x in (4096, 32768, 65536)]
    doc = results(Doc(cells, looks=(2, 4, 8)))
    doc["rule"].update(witness_share=0.25, budget_s=1800.0)
    doc["witnesses"] = [{"name": "decode-2176", "source": "witness", "clock": "wall",
                         "cells": {f"{QWYTHOS}/decode@128": 2176}, "looks": [4, 8], "pairs": 8,
                         "stopped": stopped, "samples": witness_samples(witness)}]
    return doc


def issue_h200() -> dict[str, Any]:
    return qwythos(1.09, [(22.0, 20.2)], "box_time")


def confirmed_h200() -> dict[str, Any]:
    """Only decode@128 faster (+9%: 1.80 s claimed), its witness shows 1.8 s in 4 pairs."""
    doc = qwythos(1.0, [(22.0 + j, 20.2 + j) for j in (0.0, 0.01, -0.01, 0.005)], "settled")
    doc128 = results(Doc([C(QWYTHOS, "decode", 128, 1.09)], looks=(2, 4, 8)))["cells"][0]
    doc["cells"][0] = doc128
    return doc


ISSUE_HEADLINE = ("### ❓ Not decided: 4 cells faster but not confirmed (1 witness cut for box "
                  "time, 3 no witness); 3 unchanged")
ISSUE_CUT = ("❓ decode @ 128: faster, not confirmed: evalbot's own timed run reached 1 of its 4 "
             "pairs (`decode-2176`, stopped for box time)")
ISSUE_UNCOVERED = ("❓ decode @ 4k, decode @ 32k, decode @ 64k: faster, not confirmed: no witness "
                   "covers these cells (decode@4096, decode@32768, decode@65536)")


# (results, rendered with them?) -> the why lines and the Next line, exactly
CASES: dict[str, tuple[Callable[[], dict[str, Any]], bool, list[str], str]] = {
    "issue: witness cut for box time at 1 of 4 pairs, three cells without a witness": (
        issue_h200, True, [ISSUE_CUT, ISSUE_UNCOVERED],
        "**Next:** Maintainer: " + BOX_LEVERS.format(budget=1800, name="decode-2176")
        + "; add a witness covering decode@4096, decode@32768, decode@65536 to the profile. "
        f"Contributor: {NOTHING_TO_CHANGE}."),
    "issue, from the verdict alone: the cut witness names no cells there": (
        issue_h200, False,
        ["❓ decode @ 128, decode @ 4k, decode @ 32k, decode @ 64k: faster, not confirmed: no "
         "witness judged it; evalbot's own timed run reached 1 of the 3 pairs a judgement needs "
         "(`decode-2176`, stopped for box time)"],
        "**Next:** Maintainer: " + BOX_LEVERS.format(budget=1800, name="decode-2176")
        + f". Contributor: {NOTHING_TO_CHANGE}."),
    "llamacpp H200: witness cut for box time at 1 of 3 pairs": (
        lambda: fa_off(cut_after_one_pair), True,
        [f"❓ decode @ 4k: faster, not confirmed: evalbot's own timed run reached 1 of its 3 "
         f"pairs (`{LLAMACPP_WITNESS}`, stopped for box time)", NO_WITNESS_DECODE_0,
         FA_OFF_UNDECIDED],
        "**Next:** Maintainer: " + BOX_LEVERS.format(budget=400, name=LLAMACPP_WITNESS)
        + f"; add a witness covering decode@0 to the profile; {MEASURE_MORE}. Contributor: "
        f"{NOTHING_TO_CHANGE}."),
    "llamacpp H200: witness not run, no box time left": (
        lambda: fa_off(never_run), True,
        [f"❓ decode @ 4k: faster, not confirmed: its witness `{LLAMACPP_WITNESS}` was not run: "
         "no box time was left for it", NO_WITNESS_DECODE_0, FA_OFF_UNDECIDED],
        "**Next:** Maintainer: " + BOX_LEVERS.format(budget=400, name=LLAMACPP_WITNESS)
        + f"; add a witness covering decode@0 to the profile; {MEASURE_MORE}. Contributor: "
        f"{NOTHING_TO_CHANGE}."),
    "llamacpp H200: witness ran, a saving inside its noise": (
        lambda: fa_off(noisy_saving), True,
        [f"❓ decode @ 4k: faster, not confirmed: evalbot's own timed run did not show the "
         f"saving (`{LLAMACPP_WITNESS}`, 3 pairs: 0.37 s saved a run on average where the "
         "printed rates claim 0.42 s, within its noise)", NO_WITNESS_DECODE_0, FA_OFF_UNDECIDED],
        f"**Next:** Maintainer: comment `/evalbot rerun` to measure `{LLAMACPP_WITNESS}` again; "
        f"add a witness covering decode@0 to the profile; {MEASURE_MORE}. Contributor: make the "
        f"saving show in the work `{LLAMACPP_WITNESS}` times (the engine's own run, not only its "
        "printed rate), then push."),
    "llamacpp H200: witness ran and did not show the saving": (
        lambda: fa_off(no_saving), True,
        [f"❓ decode @ 4k: faster, not confirmed: evalbot's own timed run did not show the "
         f"saving (`{LLAMACPP_WITNESS}`, 3 pairs: the PR's runs took 0.03 s longer than main's "
         "where the printed rates claim 0.42 s saved)", NO_WITNESS_DECODE_0, FA_OFF_UNDECIDED],
        f"**Next:** Maintainer: add a witness covering decode@0 to the profile; {MEASURE_MORE}. "
        f"Contributor: make the saving show in the work `{LLAMACPP_WITNESS}` times (the engine's "
        "own run, not only its printed rate), then push."),
    "llamacpp H200: the PR's witness output not main's": (
        lambda: fa_off(head_output_rejected), True,
        [f"❓ decode @ 4k: faster, not confirmed: the PR's output in evalbot's own timed run "
         f"(`{LLAMACPP_WITNESS}`) failed or did not agree with main's", NO_WITNESS_DECODE_0,
         FA_OFF_UNDECIDED],
        f"**Next:** Maintainer: add a witness covering decode@0 to the profile; {MEASURE_MORE}. "
        f"Contributor: make the PR's output in `{LLAMACPP_WITNESS}` agree with main's, then "
        "push."),
    "llamacpp H200 as measured: a tier, and one cell without a witness": (
        lambda: real(FA_OFF), True, [NO_WITNESS_DECODE_0],
        "**Next:** `eval:M` stands on decode @ 4k. For the ❓ rows: Maintainer: add a witness "
        f"covering decode@0 to the profile. Contributor: {NOTHING}."),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_first_lines_say_why_and_whose_move_it_is(case: str) -> None:
    make, with_results, why, next_line = CASES[case]
    _, text = rendered(make(), with_results)
    lines = first_lines(text)
    assert lines[2:-1] == why
    assert lines[-1] == next_line


def test_the_issue_headline_agrees_with_its_counts() -> None:
    """It read "Not decided: 0 of 7 cells stayed undecided within the budget"."""
    verdict, text = rendered(issue_h200())
    lines = first_lines(text)
    assert lines[0] == ISSUE_HEADLINE
    assert lines[1].startswith("0 slower · 0 faster · 3 unchanged · 0 undecided · 4 faster, "
                               "not confirmed · ")
    assert verdict["headline"] == "eval:inconclusive" and "0 of" not in lines[0]


def test_all_confirmed_earns_its_tier_without_a_not_confirmed_line() -> None:
    verdict, text = rendered(confirmed_h200())
    lines = first_lines(text)
    assert verdict["headline"] == "eval:M"
    assert lines[0].startswith("### ✅ Faster (99% sure): decode @ 128 +9.0% [")
    assert "1 faster · 6 unchanged" in lines[1] and len(lines) == 3
    assert lines[2] == "**Next:** nothing to do: it is faster and computes the same model."
    assert "not confirmed" not in text


# A headline phrase -> the counts line's word for the same cells
HEADLINE_WORDS = {"faster but not confirmed": "faster, not confirmed",
                  "undecided within the budget": "undecided",
                  "not measured within the budget": "not measured"}


def headline_numbers(headline: str) -> dict[str, int]:
    """`Not decided: 2 cells A, 1 cell B; 1 unchanged` -> {A's word: 2, B's word: 1, ...}."""
    body = re.sub(r" \([^)]*\)", "", headline.split(": ", 1)[1])  # the reasons in brackets
    found = {}
    for n, words in re.findall(r"(\d+) (?:cells? )?([^,;]+)", body):
        found[HEADLINE_WORDS.get(words, words)] = int(n)
    return found


def counts_numbers(counts: str) -> dict[str, int]:
    return {w: int(n) for n, w in re.findall(r"(\d+) ([a-z][a-z ,]*?)(?= ·)",
                                             counts.replace("**", ""))}


def undecided_and_unmeasured() -> dict[str, Any]:
    """A cell +9% left unconfirmed, one undecided, one the budget never reached."""
    doc = results(Doc([C("m", "decode", 128, 1.09), C("m", "decode", 4096, 1.0, noise=0.05),
                       C("m", "prefill", 4096, 1.0, pairs=0)]))
    doc["cells"][2]["stopped"] = "budget"
    doc["witnesses"] = []
    return doc


INCONCLUSIVE = {"issue H200": issue_h200, "llamacpp H200, witness cut": lambda:
                fa_off(cut_after_one_pair), "llamacpp H200 A/A": lambda: real(
                    "llamacpp/h200-aa.results.json"),
                "undecided and unmeasured": undecided_and_unmeasured}


@pytest.mark.parametrize("case", sorted(INCONCLUSIVE))
def test_an_inconclusive_headline_counts_what_its_counts_line_counts(case: str) -> None:
    verdict, text = rendered(INCONCLUSIVE[case]())
    headline, counts = first_lines(text)[:2]
    assert verdict["kind"] == "inconclusive" and re.match(r"### (⚖️|❓) Not decided: ", headline)
    said = headline_numbers(headline)
    assert said and all(n > 0 for n in said.values())  # never "0 of n cells"
    tally = counts_numbers(counts)
    assert {w: tally[w] for w in said} == said
    assert sum(said.values()) == len(verdict["cells"])


def test_the_mixed_inconclusive_headline() -> None:
    _, text = rendered(undecided_and_unmeasured())
    assert first_lines(text)[0] == (
        "### ⚖️ Not decided: 1 cell faster but not confirmed (no witness), 1 cell undecided "
        "within the budget, 1 cell not measured within the budget")


def every_comment() -> dict[str, tuple[dict[str, Any], str]]:
    out = {name: rendered(make(), with_results) for name, (make, with_results, _, _)
           in CASES.items()}
    out.update({f"inconclusive: {n}": rendered(make()) for n, make in INCONCLUSIVE.items()})
    out["all confirmed"] = rendered(confirmed_h200())
    for path in sorted(DATA.glob("*/*.results.json")):
        out[str(path.relative_to(DATA))] = rendered(json.loads(path.read_text()))
    out.update({f"demo-{n}": rendered(demo_results(n)) for n in DEMO})
    out.update({f"gpu-{n}": (v, render_comment(v)) for n, v in gpu_verdicts().items()})
    return out


def test_nothing_to_do_never_stands_beside_an_unconfirmed_cell() -> None:
    comments = every_comment()
    beside = [name for name, (verdict, text) in comments.items()
              if any(c["decision"] == "unconfirmed" for c in verdict["cells"])
              and "nothing to do" in text]
    assert beside == []
    # the control: where every faster cell is confirmed the comment still says it
    assert "nothing to do" in comments["all confirmed"][1]
    assert sum("❓" in text for _, text in comments.values()) >= len(CASES)


def test_a_rejected_pr_keeps_its_answer_first() -> None:
    """The spoofed H200 sparkinfer run: its rejection is the answer, no why line before Next."""
    verdict, text = rendered(real("sparkinfer/phase2-speedup-h200.results.json"))
    lines = first_lines(text)
    assert verdict["kind"] == "spoofed" and len(lines) == 3
    assert not any(line.startswith("❓") for line in lines)


def test_no_host_port_or_path_in_the_first_lines() -> None:
    for name, (_, text) in every_comment().items():
        top = "\n".join(first_lines(text))
        assert not re.search(r"\b\d{1,3}(\.\d{1,3}){3}\b|:\d{2,5}\b|/srv/|/home/|ssh", top), name
