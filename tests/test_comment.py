"""The PR comment: the answer in the first lines, the cells slower first, one interval notation,
proportions inside [0, 1], the details folded, and GitHub's size limit."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from evalbot.config.settings import REPO_ROOT
from evalbot.evaluation.evaluate import failure_verdict
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.report.comment import CommentContext, context_for
from evalbot.report.numbers import newcombe, p_value, sparkline, wilson
from evalbot.report.render import COMMENT_LIMIT, render_comment
from tests.comment_fixtures import DEMO, demo_results, demo_verdict, gpu_verdicts, seven_cells
from tests.test_grading import DEFAULT, C, Doc, results

QWYTHOS = [("decode", x) for x in (128, 4096, 32768, 65536)] + \
          [("prefill", x) for x in (4096, 32768, 65536, 131072)]
QWEN36 = [(m, x) for m in ("decode", "prefill") for x in (128, 512, 4096, 16384, 32768)]
ANSWERS = ("Faster", "Slower", "No speed change", "Not decided", "Rejected", "Not measured")


def _sparkinfer(ratio35: float, noise: float = 0.0, looks: tuple[int, ...] = (4, 8)) -> Doc:
    cells = [C("qwen35", m, x, ratio35 if m == "decode" and x == 32768 else 1.0, noise=noise)
             for m, x in QWYTHOS]
    cells += [C("qwen36", m, x, 1.0, noise=noise) for m, x in QWEN36]
    return Doc(cells, looks=looks)


def folded(text: str) -> list[str]:
    """The lines a reader sees with every <details> closed: its summary stays, the marker (an
    HTML comment), blank lines and table separator rows do not show."""
    shown, depth = [], 0
    for line in text.splitlines()[1:]:
        opens = line.startswith("<details>")
        if opens and depth == 0:
            shown.append(line)
        depth += line.count("<details>") - line.count("</details>")
        if opens or depth > 0 or line.startswith("</details>") or not line.strip():
            continue
        if re.fullmatch(r"\|[-:| ]+\|", line.strip()):
            continue
        shown.append(line)
    return shown


def _all() -> dict[str, tuple[dict[str, Any], str]]:
    out = {f"demo-{n}": (demo_verdict(n), render_comment(demo_verdict(n),
                                                         results=demo_results(n)))
           for n in DEMO}
    out.update({f"gpu-{n}": (v, render_comment(v)) for n, v in gpu_verdicts().items()})
    return out


COMMENTS = _all()


@pytest.mark.parametrize("name", sorted(COMMENTS))
def test_the_answer_is_in_the_first_five_lines(name: str) -> None:
    verdict, text = COMMENTS[name]
    top = "\n".join(text.splitlines()[:5])
    assert top.startswith("<!-- evalbot:v1 ")
    heading = text.splitlines()[1]
    assert heading.startswith("### ") and any(a in heading for a in ANSWERS)  # did it get faster
    assert "slower" in top and "faster" in top and "unchanged" in top  # where (the counts)
    assert "**Next:**" in top  # what next
    assert verdict["headline"] in top
    if verdict["kind"] in ("improved", "regressed"):
        assert "99% sure" in heading and re.search(r"\[[+−]\d", heading)  # how sure


@pytest.mark.parametrize("name", sorted(COMMENTS))
def test_folded_comment_is_short(name: str) -> None:
    _, text = COMMENTS[name]
    limit = 12 if name.startswith("demo") else 16
    assert len(folded(text)) <= limit, "\n".join(folded(text))


def test_seven_cell_gpu_comment_fits_sixteen_lines() -> None:
    text = render_comment(seven_cells())
    lines = folded(text)
    assert len(lines) <= 16, "\n".join(lines)
    assert sum(1 for line in lines if line.startswith("| 🔻")) == 5


@pytest.mark.parametrize("name", sorted(COMMENTS))
def test_one_interval_notation(name: str) -> None:
    _, text = COMMENTS[name]
    visible = "\n".join(folded(text))
    assert not re.search(r"\d%? (…|\.\.\.|to) [+−-]?\d", visible)
    assert not re.search(r"\(-?\d[\d.,]*%? *[-–…] *-?\d", visible)  # no "(a … b)" or "(a - b)"
    assert re.search(r"\[[+−]?\d[\d.]*%?, [+−]?\d[\d.]*%?\]", visible)


def test_slower_rows_come_first_and_are_marked() -> None:
    _, text = COMMENTS["gpu-slow"]
    rows = [line for line in text.splitlines() if re.match(r"\| \S* ?\w", line)
            and "@" in line]
    assert [r.split("|")[1].strip() for r in rows] == [
        "🔻 slower", "🔻 slower", "⚖️ undecided", "unchanged"]
    assert "**−18.9% [−32.2%, −2.9%]**" in rows[0]
    assert "decode @ 0 −18.9% [−32.2%, −2.9%]" in text.splitlines()[1]
    assert "ᵉ" in rows[3] and "ᵉ: the equivalence interval" in text  # marked and explained


def test_impossible_numbers_of_the_broken_gpu_run() -> None:
    """top-1 `0.1624 (-0.1888 ... 0.5136)`, `fell 83.76 points (interval -118.88 ...)` and
    `McNemar p 0` were published; each is now impossible."""
    _, text = COMMENTS["gpu-broken"]
    row = next(line for line in text.splitlines() if line.startswith("| top-1 agreement"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    for value in cells[1:3]:  # main and PR: proportions with Wilson intervals
        numbers = [float(x) for x in re.findall(r"\d\.\d+", value)]
        assert len(numbers) == 3 and all(0.0 <= x <= 1.0 for x in numbers), value
        assert numbers[1] <= numbers[0] <= numbers[2]
    diff = [float(x.replace("−", "-")) for x in re.findall(r"[+−]?\d+\.\d", cells[3])]
    assert len(diff) == 3 and all(-100.0 <= x <= 100.0 for x in diff), cells[3]
    assert "-0.1888" not in text and "118.88" not in text and "−118" not in text
    assert not re.search(r"p 0\b|p = 0\b|p 0\.0+\b", text)
    assert "McNemar p < 0.001" in text
    assert "1.000 → 0.162" in text.splitlines()[1]  # the headline says what changed


def test_intervals_never_leave_their_range() -> None:
    for p, lo, hi, n in ((0.1624, -0.1888, 0.5136, 1016), (1.0, 1.0, 1.0, 1016),
                         (0.0, 0.0, 0.0, 50), (0.999, 0.98, 1.02, 100), (0.5, -2.0, 3.0, 10)):
        w_lo, w_hi = wilson(p, lo, hi, n)
        assert 0.0 <= w_lo <= min(p, 1.0) <= w_hi <= 1.0
    d_lo, d_hi = newcombe(1.0, (0.996, 1.0), 0.0, (0.0, 0.004))
    assert -1.0 <= d_lo < -0.99 and d_hi <= 1.0
    assert p_value(0.0) == "< 0.001" and p_value(6.7e-257) == "< 0.001" and p_value(0.5) == "0.5"


@pytest.mark.parametrize("name", ("demo-faster", "demo-neutral", "demo-slow_long", "gpu-aa"))
def test_quiet_correctness_is_one_line(name: str) -> None:
    _, text = COMMENTS[name]
    assert "| correctness |" not in text and "1.0000 (1.0000" not in text
    assert re.search(r"correctness: (identical to main|same as main)", text.splitlines()[2])


def test_correctness_that_matters_gets_its_table() -> None:
    for name in ("demo-broken", "gpu-broken"):
        _, text = COMMENTS[name]
        assert "| correctness | main | PR | PR − main |" in text
        assert "correctness: **changed**" in text.splitlines()[2]


def test_plain_words() -> None:
    for _, text in COMMENTS.values():
        for jargon in ("Tokens per look", "inert", "margins", "regression-"):
            assert jargon not in text


def test_next_steps_for_undecided_unconfirmed_and_infra() -> None:
    _, aa = COMMENTS["gpu-aa"]
    assert aa.splitlines()[3].startswith("⚖️ prefill @ 0: undecided: the noise is wide")
    assert "`/evalbot measure-more`" in aa.splitlines()[4] and "re-push" not in aa
    unconfirmed = {**gpu_verdicts()["aa"], "kind": "unconfirmed", "headline": "eval:none"}
    unconfirmed["cells"][2] = {**unconfirmed["cells"][2], "decision": "unconfirmed"}
    text = render_comment(unconfirmed)
    assert text.splitlines()[3] == ("❓ prefill @ 0: faster, not confirmed: no witness covers "
                                    "this cell (prefill@0)\\")
    assert text.splitlines()[4].startswith("**Next:** Maintainer: add a witness covering "
                                           "prefill@0 to the profile. Contributor: nothing")
    assert "| ❓ faster, not confirmed |" in text
    infra = failure_verdict(_job(), load_labels(REPO_ROOT / "labels.yaml").policy("default"),
                            "demo", "the box did not answer")
    text = render_comment(infra)
    assert "retries" not in text and "`/evalbot rerun`" in "\n".join(text.splitlines()[:5])
    assert "not the PR's fault" in text.splitlines()[1]


def _job() -> Any:
    class Job:
        id, base_sha, head_sha = "j1", "a" * 40, "b" * 40
    return Job()


def test_unknown_decisions_and_kinds_read_as_words() -> None:
    v = gpu_verdicts()["slow"]
    v = {**v, "kind": "slower-within-tolerance", "headline": "eval:none",
         "cells": [{**v["cells"][0], "decision": "slower-within-tolerance"}, *v["cells"][1:]]}
    text = render_comment(v)
    assert "slower within tolerance" in text.splitlines()[1].lower()
    assert "1 slower within tolerance" in text.splitlines()[2]
    assert "| ⚠️ slower within tolerance |" in text
    spoofed = render_comment({**v, "kind": "spoofed", "headline": "eval:REJECT"})
    assert "harness's own clock" in spoofed.splitlines()[1]


def test_links_reproduce_and_history_from_the_store_rows() -> None:
    verdict = gpu_verdicts()["slow"]
    rows = [_row("acme/engine", f"{i:040x}", 1, verdict, created=float(i), level=500.0 + i)
            for i in range(4)]
    ctx = context_for(rows, verdict, "acme/engine", "https://reports.example/evalbot/")
    text = render_comment(verdict, context=ctx)
    assert "[dashboard](https://reports.example/evalbot/dashboard/index.html)" in text
    assert "[verdict.json](https://reports.example/evalbot/runs/gpu-e2e/verdict.json)" in text
    assert "(https://reports.example/evalbot/dashboard/cells/acme_engine/" \
           "qwen3-0p6b-synth-decode-0.html)" in text
    assert "--repo https://github.com/acme/engine.git" in text and "<engine repo>" not in text
    assert ctx.main_history["qwen3-0p6b-synth/decode@0"] == [
        pytest.approx(586.4 + i) for i in range(4)]
    assert "▁▃▆█" in text and "main, recent" in text


def _row(repo: str, base: str, pr: int, verdict: dict[str, Any], created: float,
         level: float) -> dict[str, Any]:
    cells = [{**c, "base_median": c["base_median"] + level - 500.0} for c in verdict["cells"]]
    return {"repo": repo, "pr": pr, "head_sha": "f" * 40, "base_sha": base, "created": created,
            "verdict": {**verdict, "cells": cells}, "results": {"cells": []}}


def test_no_links_without_a_reports_url() -> None:
    text = render_comment(gpu_verdicts()["slow"], context=CommentContext(repo="/srv/engine"))
    assert "](" not in "\n".join(text.splitlines()[:4])
    assert "--repo /srv/engine" in text
    assert sparkline([1.0]) == "" and sparkline([2.0, 2.0]) == "▄▄"


def test_eighteen_cells_two_models_read_as_one_table() -> None:
    doc = results(_sparkinfer(1.06))
    verdict = grade(doc, DEFAULT)
    text = render_comment(verdict, results=doc)
    assert len(verdict["cells"]) == 18 and len(text) <= COMMENT_LIMIT
    assert verdict["headline"] == "eval:M"  # +6.0%: M by its estimate (its lower bound is in S)
    assert text.splitlines()[1].startswith("### ✅ Faster (99% sure): qwen35 decode @ 32k +6.0%")
    rows = re.findall(r"^\| [^|]+ \| (qwen35|qwen36) (decode|prefill) @ (\w+) \|", text, re.M)
    assert len(rows) == 18 and rows[0] == ("qwen35", "decode", "32k")  # the faster row first
    assert "qwen36 prefill @ 32k" in text and "qwen35 prefill @ 128k" in text
    for section in ("Noise floor", "GPU and box", "Samples"):
        assert f"#### {section}" in text
    assert "<summary>Reproduce</summary>" in text


def test_oversized_details_are_dropped_never_the_verdict() -> None:
    looks = (4, 8, 16, 32, 64, 128, 256, 512, 1024)
    doc = results(_sparkinfer(1.0, noise=0.05, looks=looks))  # undecided: every pair measured
    verdict = grade(doc, DEFAULT)
    text = render_comment(verdict, results=doc)
    assert len(text) <= COMMENT_LIMIT
    assert "#### Samples" not in text
    assert "left out to fit GitHub's comment size limit" in text
    assert verdict["headline"] in text
    assert len(re.findall(r"^\| [^|]+ \| qwen3[56] (decode|prefill) @", text, flags=re.M)) == 18


def test_cells_never_measured_get_no_row_but_are_counted() -> None:
    """A run the budget never reached (the H200 speedup evaluation: the witness spent it) has
    no row of n/a, and the tally says so rather than "0 undecided" over fewer cells."""
    doc = Doc([C("m", "decode", 128, 1.0), C("m", "decode", 4096, 1.0, pairs=0)])
    text = render_comment(grade(results(doc), DEFAULT))
    assert "| decode @ 128 |" in text and "decode @ 4k" not in text
    assert "1 not measured" in text


def test_the_example_config_names_the_reports_url() -> None:
    from evalbot.config.settings import load_config

    config = load_config(REPO_ROOT / "evalbot.example.yaml")
    assert config.service.reports_url == "https://ci.example.org/evalbot"


def _number(text: str) -> float | None:
    found = re.match(r"([\d,]+(?:\.\d+)?)", text.strip())
    return float(found[1].replace(",", "")) if found else None


def _graded() -> dict[str, str]:
    """Comments of verdicts graded here from results (the gpu fixtures are hand-written)."""
    doc = results(_sparkinfer(1.06, noise=0.01))
    return {**{n: COMMENTS[n][1] for n in COMMENTS if n.startswith("demo-")},
            "sparkinfer-18": render_comment(grade(doc, DEFAULT), results=doc)}


@pytest.mark.parametrize("name, text", sorted(_graded().items()))
def test_main_pr_and_change_in_a_row_agree(name: str, text: str) -> None:
    """One estimator over the same pairs: PR / main − 1 is the change shown, to rounding (the
    demo's slow_long once showed `927 → 1,035 tok/s` as +1.0%: medians beside a mean)."""
    checked = 0
    for row in re.findall(r"^\| [^|]+ \| [^|]+ \| ([^|]+) \| ([^|]+) \| ([^|]+) \|", text, re.M):
        base, head = _number(row[0]), _number(row[1])
        change = re.search(r"([+−-])(\d+(?:\.\d+)?)%", row[2])
        if base is None or head is None or change is None or "main" in row[0]:
            continue
        shown = float(change[2]) * (-1 if change[1] in "−-" else 1)
        # the PR's figure is main's x the change, to 3 significant digits; main's is rounded
        # to what is shown; the change to 0.1 points
        third = 10 ** (math.floor(math.log10(head)) - 2)
        rounding = 100 * (0.5 * third / head + 0.5 / base) * head / base + 0.05
        assert abs(100 * (head / base - 1) - shown) <= rounding + 1e-9, row
        checked += 1
    assert checked, text


def test_eighteen_cells_fold_to_twenty_five_lines() -> None:
    doc = results(_sparkinfer(1.06))
    lines = folded(render_comment(grade(doc, DEFAULT), results=doc))
    assert len(lines) <= 25, "\n".join(lines)


@pytest.mark.parametrize("shallowest, said", [(0, None), (96, None), (1023, None),
                                               (4096, "some at 4k+ depth")])
def test_only_long_windows_claim_a_depth(shallowest: int, said: str | None) -> None:
    """"some at 0k+ depth" was in every demo comment: its windows start below 1k tokens."""
    from evalbot.report.comment_correctness import line

    text = line({"decision": "pass", "tokens": 3062, "depths": {"min": shallowest}})
    assert "depth" not in text if said is None else said in text


def test_the_details_say_the_box_time_and_its_largest_stage() -> None:
    """One line in the folded details: the total, and the largest stage where the harness
    recorded stages (the demo's stored results are from before: their total alone)."""
    old = demo_results("broken")
    # no stages, no `timing` in the provenance: re-grading stored results changes no verdict
    assert "timing" not in demo_verdict("broken")["provenance"]
    text = render_comment(demo_verdict("broken"), results=old)
    # timing.total_s 76.51, published as 76.5 (3 significant digits: the PR steers box time)
    assert "\n- Box time 1 min 16 s.\n" in text
    assert not any("Box time" in line for line in folded(text))  # folded away
    stages = {"builds": 0.2, "warmups": 3.1, "measuring": 40.2, "witnesses": 0.0,
              "correctness_reference": 8.0, "correctness_base": 9.5, "correctness_head": 9.6,
              "rest": 5.9}  # as the harness writes them now
    new = {**old, "timing": {"total_s": 76.5, "stages": stages}}
    verdict = grade(new, load_labels(REPO_ROOT / "labels.yaml").policy("default"))
    assert verdict["provenance"]["timing"] == new["timing"]
    line = "\n- Box time 1 min 16 s, largest: measuring 40 s.\n"
    assert line in render_comment(verdict)  # from the verdict alone, as a stored one renders
    assert line in render_comment(verdict, results=new)
