"""The PR comments as a contributor sees them: markdown rendered to HTML as GitHub renders it,
then drawn by headless Chromium, details folded.

GitHub's own renderer (cmark-gfm behind POST /markdown) cannot be reached from here, so the
comments go through markdown-it-py: a CommonMark-conformant parser (GitHub's flavour is a
CommonMark superset), with GFM tables and raw HTML blocks (<details>, <sub>) as GitHub keeps
them. It is already installed with rich, which evalbot depends on.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from PIL import Image

from evalbot.config.settings import REPO_ROOT
from evalbot.evaluation.evaluate import failure_verdict
from evalbot.grading.policy import load_labels
from evalbot.report.render import render_comment
from tests.comment_fixtures import DEMO, demo_results, demo_verdict, gpu_verdicts, seven_cells
from tests.test_dashboard import _chromium, _console

# GitHub's comment body, approximately: 14 px system font, 1.5 line height, bordered tables.
CSS = """
body { font: 14px/1.5 -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: #1f2328;
       background: #fff; margin: 0; }
.markdown-body { width: 760px; padding: 16px; }
h3 { font-size: 1.25em; margin: 0 0 8px; } p { margin: 0 0 10px; }
table { border-collapse: collapse; margin: 0 0 10px; display: block; overflow: auto; }
td, th { border: 1px solid #d1d9e0; padding: 6px 13px; } tr:nth-child(2n) { background: #f6f8fa; }
code { font-size: 85%; background: #eff1f3; padding: .2em .4em; border-radius: 6px; }
details { margin: 0 0 10px; } sub { font-size: 75%; }
"""
GITHUB_MD = MarkdownIt("commonmark", {"html": True}).enable("table")


def _comments() -> dict[str, str]:
    out = {f"demo-{n}": render_comment(demo_verdict(n), results=demo_results(n)) for n in DEMO}
    out.update({f"gpu-{n}": render_comment(v) for n, v in gpu_verdicts().items()})
    out["gpu-7-cells"] = render_comment(seven_cells())

    class Job:
        id, base_sha, head_sha = "j1", "a" * 40, "b" * 40
    out["infra-error"] = render_comment(failure_verdict(
        Job(), load_labels(REPO_ROOT / "labels.yaml").policy("default"), "demo",  # type: ignore[arg-type]
        "the box did not answer"))
    return out


COMMENTS = _comments()


def _page(name: str, tmp_path: Path) -> Path:
    page = tmp_path / f"{name}.html"
    page.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"><style>{CSS}</style>'
                    f'</head><body><div class="markdown-body">{GITHUB_MD.render(COMMENTS[name])}'
                    "</div></body></html>", encoding="utf-8")
    return page


def _painted_height(shot: Path) -> int:
    """The lowest row of pixels that is not background: how tall the folded comment is."""
    img = Image.open(shot).convert("L")
    width, height = img.size
    data = img.load()
    for y in range(height - 1, -1, -1):
        if any(data[x, y] < 240 for x in range(0, width, 2)):
            return y
    return 0


@pytest.mark.parametrize("name", sorted(COMMENTS))
def test_comment_renders_as_github_shows_it(name: str, tmp_path: Path) -> None:
    page = _page(name, tmp_path)
    done = _chromium(["--dump-dom"], page, tmp_path / "profile")
    assert done.returncode == 0 and _console(done.stderr) == []
    dom = done.stdout
    body = dom.split('<div class="markdown-body">', 1)[1]
    first = re.match(r"\s*(<!--.*?-->)?\s*<h3>(.*?)</h3>", body, re.S)
    assert first, body[:300]  # the marker is invisible; the headline is the first thing shown
    assert re.search(r"Faster|Slower|No speed change|Not decided|Rejected|Not measured",
                     first.group(2))
    assert " open" not in "".join(re.findall(r"<details[^>]*>", dom))  # all folded
    tables = re.findall(r"<table>(.*?)</table>", body, re.S)
    if name.startswith("gpu-slow") or name == "gpu-7-cells" or name == "demo-slow_long":
        rows = re.findall(r"<tr>(.*?)</tr>", tables[0], re.S)
        assert "🔻 slower" in rows[1] and "<strong>−" in rows[1]  # slower first, marked
    if name != "infra-error":
        assert "<sub>[lo, hi]:" in body  # the notation's footnote is rendered, not literal
        assert "|---" not in body  # every table parsed as a table
    shot = tmp_path / f"{name}.png"
    done = _chromium([f"--screenshot={shot}", "--window-size=800,2400"], page,
                     tmp_path / "profile")
    assert done.returncode == 0 and shot.is_file()
    height = _painted_height(shot)
    # 12 (16 for the GPU) visible lines and a table row or two of wrapping, never the details
    assert 60 < height < (900 if name.startswith("demo") else 1100), height


def test_the_folded_details_would_be_tall(tmp_path: Path) -> None:
    """The control for the height bound: the same comment with its details open is taller."""
    name = "demo-faster"
    folded = _page(name, tmp_path)
    opened = tmp_path / "open.html"
    opened.write_text(folded.read_text().replace("<details>", "<details open>"))
    heights = []
    for page in (folded, opened):
        shot = tmp_path / f"{page.stem}.png"
        _chromium([f"--screenshot={shot}", "--window-size=800,4000"], page, tmp_path / "p")
        heights.append(_painted_height(shot))
    assert heights[1] > heights[0] + 400
