"""The dashboard from a real history (stub engine -> harness -> grading -> Store), rendered by
headless Chromium (Debian's `chromium`, installed by .ci/setup-chromium)."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from PIL import Image

from evalbot.report.dashboard import _environment, build_site, dashboard
from evalbot.report.dashboard_pages import cell_pages
from evalbot.report.history import (
    NoisePoint,
    cell_page,
    main_series,
    noise_points,
)
from evalbot.store.jobs import Store
from tests.graded_history import measure, record
from tests.stub_engine import make_repo

# Planted in fields that reach the page: a model name (chart titles, tables) and a repository.
EVIL_MODEL = "m<script>document.body.dataset.pwned=1</script>"
EVIL_REPO = "evil/<img src=x onerror=document.body.dataset.pwned=2>"
DAY = 86400.0
T0 = 1_750_000_000.0
VARIANTS = {
    "pr1": {"decode": 1200.0, "prefill": 1.1e6},
    "pr2": {"decode": 1300.0, "prefill": 1.15e6},
    "pr2_squashed": {"decode": 1300.0, "prefill": 1.15e6},  # what main became when #2 merged
    "pr3": {"decode": 1100.0, "prefill": 1.15e6},
}


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, dict[str, str]]:
    """Main's journey: main0 -(#1, fast-forward)-> pr1 -(#2, squashed)-> pr2_squashed."""
    root = tmp_path_factory.mktemp("history")
    repo, main0, shas = make_repo(root, VARIANTS)
    shas["main0"] = main0
    store = Store(root / "evalbot.sqlite3")
    plan = [("acme/engine", 1, "main0", "pr1", 1), ("acme/engine", 1, "main0", "pr1", 2),
            ("acme/engine", 2, "pr1", "pr2", 1), ("acme/engine", 3, "pr2_squashed", "pr3", 1),
            (EVIL_REPO, None, "pr2_squashed", "pr3", 1)]
    for day, (name, pr, base, head, attempt) in enumerate(plan):
        results, verdict = measure(repo, shas[base], shas[head], root / f"job{day}", EVIL_MODEL)
        job = record(store, name, pr, shas[base], shas[head], results, verdict, attempt)
        # Spread the history over days, as a real one is (the store stamps "now").
        store.db.execute("UPDATE verdicts SET created=? WHERE job_id=?", (T0 + day * DAY, job))
    store.record_merge("acme/engine", 2, shas["pr2"], shas["pr2_squashed"], T0 + 2.5 * DAY)
    return store, shas


def test_main_levels_and_steps_credit_the_merged_prs(history):
    store, shas = history
    series = [s for s in main_series(store.history(), store.merges()) if s.repo == "acme/engine"]
    assert {(s.metric, s.ctx) for s in series} == {("decode", 128), ("prefill", 4096)}
    decode = next(s for s in series if s.metric == "decode")
    assert [lv.sha for lv in decode.levels] == [shas["main0"], shas["pr1"], shas["pr2_squashed"]]
    assert [lv.observations for lv in decode.levels] == [2, 1, 1]
    # a level is an estimate over few noisy samples (one run gave 1294 for 1300): within 2%
    assert [lv.value for lv in decode.levels] == pytest.approx([1000, 1200, 1300], rel=0.02)
    # #1 by its head becoming main (fast-forward); #2 only through the merges table (squash).
    assert [st.pr for st in decode.steps] == [1, 2]
    assert decode.steps[0].change == pytest.approx(0.20, abs=0.02)
    assert decode.steps[1].change == pytest.approx(1300 / 1200 - 1, abs=0.02)
    # the PR's own measurement, where its verdict believed it: a decode gain the stub's
    # witness did not confirm (it can miss +8% on a loaded machine) is not published at all
    [pr2] = [h for h in store.history(repo="acme/engine", pr=2)]
    cell = next(c for c in pr2["verdict"]["cells"] if c["metric"] == "decode")
    if cell["decision"] == "unconfirmed":
        assert decode.steps[1].pr_estimate is None
        return
    speedup, lo, hi = decode.steps[1].pr_estimate
    assert lo < speedup < hi and speedup == pytest.approx(0.083, abs=0.02)


def test_noise_is_the_spread_of_the_pair_log_ratios(history):
    store, _ = history
    points = noise_points(store.history())
    assert len(points) == 5 * 2  # every verdict, both cells
    assert {p.source for p in points} == {"verdict"}
    # the stub draws each sample's noise with sd 0.2%: a log-ratio of two has sd about 0.28%.
    # One cell's sd over 3-5 pairs has 2-4 degrees of freedom and falls below 0.03% about 1%
    # of the time, so the bounds are on every cell loosely and on their pooled value tightly.
    assert all(0 < p.sd < 0.012 and p.pairs >= 3 for p in points)
    pooled = (sum(p.sd ** 2 * (p.pairs - 1) for p in points)
              / sum(p.pairs - 1 for p in points)) ** 0.5
    assert 0.0012 < pooled < 0.006


def test_page_escapes_planted_markup_and_loads_nothing(history, tmp_path):
    store, _ = history
    html = build_site(store, tmp_path / "site").read_text()
    assert "m&lt;script&gt;document.body.dataset.pwned=1&lt;/script&gt;" in html
    assert "evil/&lt;img src=x onerror" in html
    assert "<script" not in html and "<img" not in html
    # offline: no resource reference at all; the only URLs are links to PRs
    assert not re.search(r'<[^<>]*\s(src|srcset|poster)=|<link\b|@import|url\((?!#)', html)
    assert set(re.findall(r'href="(https?://[^"]+)"', html)) == {
        f"https://github.com/acme/engine/pull/{n}" for n in (1, 2, 3)}


def _chromium(args: list[str], page: Path, profile: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("chromium")
    assert exe, "chromium is missing: .ci/setup-chromium installs it"
    return subprocess.run(
        [exe, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
         "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}", *args,
         page.as_uri()], capture_output=True, text=True, timeout=120, check=False)


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def test_chromium_would_run_planted_script_if_unescaped(tmp_path):
    """The control for the escaping test: the same check does catch an executed plant."""
    page = tmp_path / "raw.html"
    page.write_text(f"<html><body><p>{EVIL_MODEL}</p><script>console.error('x')</script></body>"
                    "</html>")
    done = _chromium(["--dump-dom"], page, tmp_path / "profile")
    assert 'data-pwned="1"' in done.stdout
    assert _console(done.stderr)


def test_chromium_renders_the_charts_without_errors(history, tmp_path):
    store, _ = history
    page = build_site(store, tmp_path / "site")
    done = _chromium(["--dump-dom"], page, tmp_path / "profile")
    assert done.returncode == 0, done.stderr[-2000:]
    assert _console(done.stderr) == []
    dom = done.stdout
    assert "data-pwned" not in dom
    charts = re.findall(r'<svg class="chart" data-chart="(c\d+)"', dom)
    assert len(charts) == 2 + 1  # acme's 2 cells and one box's noise chart
    frontier = dom.split('id="frontier"')[1].split('id="verdicts"')[0]
    assert frontier.count('<svg class="chart"') == 2
    # the planted repository has main at one commit: a sentence per cell, no flat line
    assert frontier.count("main was measured at one commit so far") == 2
    assert "#1 +" in frontier and "#2 +" in frontier  # the step markers, as SVG text
    assert re.search(r'<a href="https://github.com/acme/engine/pull/2">#2</a>', dom)
    verdicts = dom.split('id="verdicts"')[1].split('id="noise"')[0]
    assert verdicts.count("<tr>") == 1 + 5
    shot = tmp_path / "shot.png"
    done = _chromium([f"--screenshot={shot}", "--window-size=1280,2000"], page,
                     tmp_path / "profile")
    assert done.returncode == 0 and shot.is_file()
    colors = Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 20) or []
    painted = {rgb: n for n, rgb in colors}
    assert painted.get((0x1F, 0x77, 0xB4), 0) > 500  # main's step line is drawn
    assert painted.get((0x2C, 0xA0, 0x2C), 0) > 50  # a green step marker: #1 made main faster


def test_cli_writes_the_site_and_names_a_missing_store(history, tmp_path):
    store, _ = history
    runner = CliRunner()
    done = runner.invoke(dashboard, ["--out", str(tmp_path / "site"), "--store", str(store.path)])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "site" / "index.html").is_file()
    done = runner.invoke(dashboard, ["--out", str(tmp_path / "x"), "--store",
                                     str(tmp_path / "none.sqlite3")])
    assert done.exit_code != 0 and "none.sqlite3: no such store" in str(done.exception)


def test_empty_history_renders_a_page_that_says_so(tmp_path):
    html = build_site(Store(tmp_path / "empty.sqlite3"), tmp_path / "site").read_text()
    assert "No measurement of main yet." in html and "No verdict yet." in html


def _page(site: Path, dom: str, href: str) -> Path:
    """The file a relative link of a page points at (it must exist)."""
    target = (site / href).resolve()
    assert target.is_file(), href
    return target


def test_cell_pages_show_history_band_movers_and_verdicts(history, tmp_path):
    store, _ = history
    site = tmp_path / "site"
    build_site(store, site)
    index = (site / "index.html").read_text()
    pages = re.findall(r'<a class="cell" href="([^"]+)"', index)
    assert len(pages) == 4 and all(_page(site, index, p) for p in pages)
    page = site / cell_page("acme/engine", EVIL_MODEL, "decode", 128)
    done = _chromium(["--dump-dom"], page, tmp_path / "profile")
    assert done.returncode == 0 and _console(done.stderr) == []
    dom = done.stdout
    assert "data-pwned" not in dom
    history_part = dom.split('id="history"')[1].split('id="moved"')[0]
    assert history_part.count('<svg class="chart"') == 1
    assert "noise band (±2 sd of one run)" in history_part  # the legend of the band
    moved = dom.split('id="moved"')[1].split('id="verdicts"')[0]
    assert re.search(r'<a href="https://github.com/acme/engine/pull/1">#1</a>', moved)
    assert re.search(r'<a href="https://github.com/acme/engine/pull/2">#2</a>', moved)
    verdicts = dom.split('id="verdicts"')[1]
    assert verdicts.count("<tr") == 1 + 4  # acme's four verdicts, not the planted repo's
    assert verdicts.count('<tr class="slower">') == 1  # #3 made decode slower
    assert re.search(r"−15\.\d% \[−1\d\.\d%, −1\d\.\d%\]", verdicts)
    shot = _screenshot(page, tmp_path)
    painted = {rgb: n for n, rgb in Image.open(shot).convert("RGB").getcolors(1 << 20) or []}
    assert painted.get((0x1F, 0x77, 0xB4), 0) > 300  # main's level line
    # the shaded noise band is drawn (its height is the box's measured noise: small here)
    assert 'style="fill: #1f77b4; fill-opacity: 0.15"' in history_part
    assert sum(n for rgb, n in painted.items() if _is_band(rgb)) > 200
    assert sum(n for rgb, n in painted.items() if rgb[0] > 180 and rgb[1] < 80) > 50  # red row


def _is_band(rgb: tuple[int, int, int]) -> bool:
    """#1f77b4 at 15% over white: about (221, 235, 244)."""
    return all(abs(a - b) <= 6 for a, b in zip(rgb, (221, 235, 244), strict=True))


def _tallest_band(img: Image.Image) -> int:
    """The most band-coloured pixels in one column, one above the other (a gap of 3 px for a
    grid line or a point is bridged): how tall the band is drawn."""
    px, (width, height) = img.load(), img.size
    best = 0
    for x in range(0, width, 4):
        run = gap = 0
        for y in range(height):
            if _is_band(px[x, y]):
                run, gap = run + 1 + gap, 0
            elif run and gap < 3:
                gap += 1
            else:
                run = gap = 0
            best = max(best, run)
    return best


def _screenshot(page: Path, tmp_path: Path) -> Path:
    shot = tmp_path / f"{page.stem}.png"
    done = _chromium([f"--screenshot={shot}", "--window-size=1280,1600"], page,
                     tmp_path / "profile")
    assert done.returncode == 0 and shot.is_file()
    assert Image.open(shot).size[0] == 1280
    return shot


def test_regressions_page_lists_slower_cells_with_links(history, tmp_path):
    store, _ = history
    site = tmp_path / "site"
    build_site(store, site)
    page = site / "regressions.html"
    done = _chromium(["--dump-dom"], page, tmp_path / "profile")
    assert done.returncode == 0 and _console(done.stderr) == []
    rows = re.findall(r'<tr class="slower">(.*?)</tr>', done.stdout, re.S)
    assert len(rows) == 2  # #3 on acme and the planted repo's run of the same head
    assert "#3" in rows[0] or "#3" in rows[1]
    for row in rows:
        href = re.search(r'<td><a href="(cells/[^"]+)">', row)
        assert href and _page(site, done.stdout, href.group(1))
        assert "decode @ 128" in row
    _screenshot(page, tmp_path)


@pytest.fixture(scope="module")
def one_main(tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """(main, head, results, verdict): one real evaluation of a head on the demo's model name,
    measured once for the tests that record it (each of them records its own copies)."""
    root = tmp_path_factory.mktemp("one-main")
    repo, main0, shas = make_repo(root, {"pr1": {"decode": 1200.0, "prefill": 1.1e6}})
    results, verdict = measure(repo, main0, shas["pr1"], root / "job", "tiny")
    return main0, shas["pr1"], results, verdict


def test_one_main_commit_draws_no_line_and_claims_no_steps(one_main, tmp_path):
    """The demo's history: every verdict measured the same main within minutes."""
    main0, head, results, verdict = one_main
    store = Store(tmp_path / "evalbot.sqlite3")
    for n in (1, 2):  # two PRs' verdicts on the one main
        record(store, "demo/engine", n, main0, head, copy.deepcopy(results),
               copy.deepcopy(verdict), 1)
    site = tmp_path / "site"
    build_site(store, site)
    for page in [site / "index.html", *sorted((site / "cells").rglob("*.html"))]:
        html = page.read_text()
        assert '<svg class="chart"' not in html, page  # no flat line over seconds of axis
        assert "Each step of main" not in html  # no caption about steps that do not exist
        assert "main was measured at one commit so far" in html
        assert f"({main0[:10]})" in html
        _screenshot(page, tmp_path)
    assert "Main has not moved on this cell yet." in (site / "cells").rglob("*.html").__next__(
        ).read_text()
    assert "No regression measured yet." in (site / "regressions.html").read_text()


def test_cell_page_paths_stay_inside_the_site():
    """A hostile repository or model name cannot write a page outside cells/."""
    for repo, model in (("../../etc", ".."), ("/abs/path", "a/../../b"), ("", "")):
        path = Path(cell_page(repo, model, "decode/../x", 128))
        assert path.parts[0] == "cells" and len(path.parts) == 3
        assert ".." not in path.parts and not path.is_absolute()


def test_each_verdict_links_its_verdict_and_results_json(history, tmp_path):
    import json

    store, _ = history
    site = tmp_path / "site"
    html = build_site(store, site).read_text()
    rows = store.history()
    for row in rows:
        for name in ("verdict.json", "results.json"):
            href = f'runs/{row["job_id"]}/{name}'
            assert f'href="{href}"' in html, href
            assert json.loads((site / href).read_text())["schema"] is not None
        assert json.loads((site / "runs" / row["job_id"] / "verdict.json").read_text()) \
            == row["verdict"]


def test_the_demo_repository_gets_no_github_link(one_main, tmp_path):
    from evalbot.evaluation import demo
    from evalbot.report import dashboard_pages

    assert dashboard_pages.DEMO_REPO == demo.DEMO_REPO
    main0, head, results, verdict = one_main
    store = Store(tmp_path / "evalbot.sqlite3")
    record(store, "demo/engine", 1, main0, head, copy.deepcopy(results), copy.deepcopy(verdict), 1)
    site = tmp_path / "site"
    build_site(store, site)
    for page in [site / "index.html", site / "regressions.html", *(site / "cells").rglob("*.html")]:
        assert "https://" not in page.read_text(), page


def test_the_noise_band_is_visible_at_three_per_mille(history, tmp_path):
    """Main moved 30% on this cell, its noise is 0.3%: on the level's axis the band (±0.42%) is
    thinner than the level's line, so the page draws it again under the chart, in % of the
    level, where it must fill a good part of the panel in the screenshot."""
    store, _ = history
    site = tmp_path / "site"
    build_site(store, site)
    rows = store.history()
    series = main_series(rows, store.merges())
    [box] = {s.box for s in series if s.repo == "acme/engine"}
    key = f"{EVIL_MODEL}/decode@128"
    noise = [NoisePoint(box, key, T0, 0.003, 20, "calibration")]
    ids = iter(range(1, 1000))
    path = cell_page("acme/engine", EVIL_MODEL, "decode", 128)
    html = cell_pages(_environment(), rows, series, noise, lambda: f"c{next(ids)}")[path]
    assert "noise band ±0.43%" in html  # exp(2 · 0.3% / √2) - 1
    page = site / path
    page.write_text(html)
    img = Image.open(_screenshot(page, tmp_path)).convert("RGB")
    assert _tallest_band(img) >= 25  # px: the panel's band; the level axis's is a few px


def test_each_recent_verdict_shows_its_box_time_and_largest_stage(history, tmp_path):
    from evalbot.report.box_time_view import WORDS, duration

    store, _ = history
    html = build_site(store, tmp_path / "site").read_text()
    for row in store.history():
        # recorded by the harness, stage by stage, and published in the verdict's provenance
        # (at 3 significant digits: the results' own 9.649 s is published as 9.65 s)
        timing = (row["verdict"].get("provenance") or {}).get("timing") or row["results"]["timing"]
        assert timing["stages"] and timing["total_s"] > 0
        name, seconds = max(timing["stages"].items(), key=lambda item: item[1])
        cell = f"{duration(timing['total_s'])}, largest: {WORDS[name]} {duration(seconds)}"
        assert f'<td class="free">{cell}</td>' in html, cell
