"""The PR comment: headline, one table per model, folded details, and GitHub's size limit."""

from __future__ import annotations

import re

from evalbot.grading import grade
from evalbot.render import COMMENT_LIMIT, render_comment
from tests.test_grading import DEFAULT, C, Doc, results

QWYTHOS = [("decode", x) for x in (128, 4096, 32768, 65536)] + \
          [("prefill", x) for x in (4096, 32768, 65536, 131072)]
QWEN36 = [(m, x) for m in ("decode", "prefill") for x in (128, 512, 4096, 16384, 32768)]


def _sparkinfer(ratio35: float, noise: float = 0.0, looks: tuple[int, ...] = (4, 8)) -> Doc:
    cells = [C("qwen35", m, x, ratio35 if m == "decode" and x == 32768 else 1.0, noise=noise)
             for m, x in QWYTHOS]
    cells += [C("qwen36", m, x, 1.0, noise=noise) for m, x in QWEN36]
    return Doc(cells, looks=looks)


def test_eighteen_cells_two_models_read_as_tables() -> None:
    doc = results(_sparkinfer(1.06))
    verdict = grade(doc, DEFAULT)
    text = render_comment(verdict, results=doc)
    assert len(verdict["cells"]) == 18 and len(text) <= COMMENT_LIMIT
    assert verdict["headline"] == "eval:M"  # +6.0%: M by its estimate (its lower bound is in S)
    assert text.splitlines()[1].startswith("## ✅ evalbot: **eval:M**")
    assert "decode at 32k: +6.0%" in text.splitlines()[3]
    rows = re.findall(r"^\| (decode|prefill) \| (\w+) \|", text, flags=re.M)
    assert len(rows) == 18
    assert "### qwen35 (primary) · `eval-qwen35:M`" in text
    assert "### qwen36 (primary) · `eval-qwen36:none`" in text
    assert "| prefill | 128k |" in text  # contexts named as people write them
    for section in ("Noise floor", "GPU and box", "Samples", "Reproduce"):
        assert f"<summary>{section}</summary>" in text


def test_oversized_details_are_dropped_never_the_verdict() -> None:
    looks = (4, 8, 16, 32, 64, 128, 256, 512, 1024)
    doc = results(_sparkinfer(1.0, noise=0.05, looks=looks))  # undecided: every pair measured
    verdict = grade(doc, DEFAULT)
    text = render_comment(verdict, results=doc)
    assert len(text) <= COMMENT_LIMIT
    assert "<summary>Samples</summary>" not in text
    assert "left out to fit GitHub's comment size limit" in text
    assert verdict["headline"] in text
    assert len(re.findall(r"^\| (decode|prefill) \|", text, flags=re.M)) == 18


def test_cells_never_measured_get_no_row() -> None:
    doc = Doc([C("m", "decode", 128, 1.0), C("m", "decode", 4096, 1.0, pairs=0)])
    text = render_comment(grade(results(doc), DEFAULT))
    assert "| decode | 128 |" in text and "| decode | 4k |" not in text
