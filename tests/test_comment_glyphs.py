"""Every character a PR comment shows has a glyph in the fonts it is drawn with.

The comments (tests/test_comment_screenshots.py's set: each demo comment, the GPU ones, a
failure) are rendered to HTML as GitHub renders them, their visible text taken (not the hidden
marker), and each character checked twice:

- fontconfig, as Chromium asks it: the font `fc-match` picks for the body's family with that
  character required (fontconfig ranks coverage above family, so it names a covering font if
  any is installed), and that font's own cmap (read with fontTools) must map the character;
- Chromium itself: each character drawn large in a cell of a glyph sheet, screenshot taken, and
  the cell compared with the cell of a character that no installed font covers (what a missing
  glyph looks like: the .notdef box), which it must not equal.

The emoji (🔻, 🟢, ✅ ...) need an emoji font: .ci/setup-fonts installs Noto Color Emoji.
"""

from __future__ import annotations

import subprocess
import unicodedata
from functools import cache
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fontTools.ttLib import TTFont
from PIL import Image, ImageChops

from tests.test_comment_screenshots import COMMENTS, GITHUB_MD
from tests.test_dashboard import _chromium

FAMILY = "DejaVu Sans"  # the first of the page's families that is installed (CSS in the sheet)
UNCOVERED = "\U00013000"  # EGYPTIAN HIEROGLYPH A001: no font of the test machine has it
CELL = 80
PER_ROW = 16


class _Text(HTMLParser):
    """The text a reader sees: character data, not comments, tags or attribute values."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def visible_text(markdown: str) -> str:
    parser = _Text()
    parser.feed(GITHUB_MD.render(markdown))
    parser.close()
    return "".join(parser.parts)


def needs_glyph(ch: str) -> bool:
    """Whitespace, controls and format characters (variation selectors, ZWJ) draw nothing."""
    return not ch.isspace() and unicodedata.category(ch) not in {"Cc", "Cf", "Mn"} \
        and not 0xFE00 <= ord(ch) <= 0xFE0F


@cache
def _cmap(path: str) -> frozenset[int]:
    font = TTFont(path, fontNumber=0, lazy=True)
    return frozenset(font.getBestCmap() or {})


@cache
def font_for(ch: str) -> str | None:
    """The font file fontconfig gives for `ch` in the page's family, if that font has it."""
    done = subprocess.run(["fc-match", "-f", "%{file}", f"{FAMILY}:charset={ord(ch):x}"],
                          capture_output=True, text=True, timeout=30, check=True)
    path = done.stdout.strip()
    return path if path and ord(ch) in _cmap(path) else None


def missing_glyphs(markdown: str) -> dict[str, str]:
    """Each character of the rendered comment that no rendering font has: {char: its name}."""
    return {ch: unicodedata.name(ch, f"U+{ord(ch):04X}")
            for ch in sorted(set(visible_text(markdown))) if needs_glyph(ch) and font_for(ch) is None}


def drawn_as_missing(chars: list[str], tmp_path: Path) -> list[str]:
    """The characters Chromium draws exactly as it draws UNCOVERED (the missing-glyph box)."""
    sheet = [UNCOVERED, *chars]
    cells = "".join(
        f'<div style="left:{(i % PER_ROW) * CELL}px;top:{(i // PER_ROW) * CELL}px">{ch}</div>'
        for i, ch in enumerate(sheet))
    page = tmp_path / "glyphs.html"
    page.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><style>body{margin:0;background:#fff}'
        f"div{{position:absolute;width:{CELL}px;height:{CELL}px;line-height:{CELL}px;"
        f'text-align:center;font:48px "{FAMILY}",sans-serif;color:#000}}</style></head>'
        f"<body>{cells}</body></html>", encoding="utf-8")
    shot = tmp_path / "glyphs.png"
    rows = (len(sheet) + PER_ROW - 1) // PER_ROW
    done = _chromium([f"--screenshot={shot}", f"--window-size={PER_ROW * CELL},{rows * CELL}"],
                     page, tmp_path / "profile")
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    img = Image.open(shot).convert("RGB")

    def cell(i: int) -> Image.Image:
        x, y = (i % PER_ROW) * CELL, (i // PER_ROW) * CELL
        return img.crop((x, y, x + CELL, y + CELL))

    box = cell(0)
    assert box.getbbox() is not None and ImageChops.invert(box).getbbox() is not None  # inked
    return [ch for i, ch in enumerate(chars, 1) if ImageChops.difference(cell(i), box).getbbox() is None]


def test_the_uncovered_character_is_in_no_installed_font():
    """The control's premise: fontconfig knows no font with UNCOVERED (else pick another)."""
    done = subprocess.run(["fc-list", f":charset={ord(UNCOVERED):x}", "file"],
                          capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.strip() == ""
    assert subprocess.run(["fc-list", ":charset=1f53b", "file"], capture_output=True, text=True,
                          timeout=30, check=True).stdout.strip(), \
        "no emoji font: .ci/setup-fonts installs fonts-noto-color-emoji"


@pytest.mark.parametrize("name", sorted(COMMENTS))
def test_every_character_of_the_comment_has_a_glyph(name: str, tmp_path: Path) -> None:
    assert missing_glyphs(COMMENTS[name]) == {}
    shown = sorted({ch for ch in visible_text(COMMENTS[name]) if ord(ch) > 0x7F and needs_glyph(ch)})
    assert drawn_as_missing(shown, tmp_path) == []


def test_a_character_without_a_glyph_fails_both_checks(tmp_path: Path) -> None:
    """The control: a character no font has fails both checks; the covered ones beside it pass."""
    comment = COMMENTS["demo-faster"].replace("###", "### \U00013001", 1)
    assert missing_glyphs(comment) == {"\U00013001": "EGYPTIAN HIEROGLYPH A002"}
    assert drawn_as_missing(["\U00013001", "🔻", "a"], tmp_path) == ["\U00013001"]
