"""Every run has a page on the dashboard, linked from its comment (issue 48, point 8).

From a real history (stub engine -> harness -> grading -> Store, tests/test_dashboard.py's, with
a model name and a repository that plant HTML): the site is built, each run's comment rendered
with the links the service gives it, and every link the comment makes into the dashboard, and
every relative link of every page written, must resolve to a file of the site. Then headless
Chromium loads a run page: its comment, cells, witnesses, correctness and box time per stage are
there, the planted scripts did not run, and the console is clean.
"""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from evalbot.report.comment import context_for
from evalbot.report.dashboard import build_site
from evalbot.report.publication import public_row
from evalbot.report.render import render_comment
from evalbot.report.run_page import run_path
from evalbot.store.jobs import Store
from tests.graded_history import measure, policy
from tests.stub_engine import make_repo
from tests.test_dashboard import EVIL_MODEL, EVIL_REPO, VARIANTS, _chromium, _console


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.hrefs += [v for k, v in attrs if k == "href" and v]


def hrefs(html: str) -> list[str]:
    parser = _Links()
    parser.feed(html)
    return parser.hrefs


def broken_links(site: Path) -> list[str]:
    """Every relative link of every page that names no file of the site."""
    broken = []
    for page in sorted(site.rglob("*.html")):
        for href in hrefs(page.read_text(encoding="utf-8")):
            parts = urlsplit(href)
            if parts.scheme or href.startswith("#"):
                continue
            target = (page.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(site)} -> {href}")
    return broken


def record_as_the_service_does(store: Store, repo_name: str, pr: int | None, base: str,
                               head: str, results: dict[str, Any], verdict: dict[str, Any]) -> str:
    """Queue, lease and finish a job whose verdict names its job, as evaluate's does."""
    row = store.enqueue(repo_name, pr, head, policy().ident, base_sha=base)
    verdict = {**verdict, "provenance": {**verdict["provenance"], "job_id": row.id}}
    leased = store.lease("test-worker", 600)
    assert leased is not None and leased.id == row.id
    assert store.finish(row.id, "test-worker", verdict, results)
    return row.id


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """Three evaluations of the stub engine by the real harness: two PRs of acme/engine and one
    of a repository whose name plants HTML, on a model whose name plants a script."""
    root = tmp_path_factory.mktemp("history")
    repo, main0, shas = make_repo(root, VARIANTS)
    shas["main0"] = main0
    store = Store(root / "evalbot.sqlite3")
    for n, (name, pr, base, head) in enumerate([("acme/engine", 1, "main0", "pr1"),
                                                ("acme/engine", 2, "pr1", "pr3"),
                                                (EVIL_REPO, None, "pr1", "pr3")]):
        results, verdict = measure(repo, shas[base], shas[head], root / f"job{n}", EVIL_MODEL)
        record_as_the_service_does(store, name, pr, shas[base], shas[head], results, verdict)
    return store


@pytest.fixture(scope="module")
def site(history: Store, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("reports")
    build_site(history, root / "dashboard")
    return root


def test_every_link_of_the_comment_into_the_dashboard_is_a_written_page(history: Store,
                                                                        site: Path) -> None:
    store = history
    reports = site.as_uri()
    rows = store.history()
    checked = 0
    for row in rows:
        shown = public_row(row)
        ctx = context_for(rows, shown["verdict"], row["repo"], reports)
        text = render_comment(shown["verdict"], results=shown["results"], context=ctx)
        links = re.findall(r"\]\((file://[^)\s]+)\)", text)
        into = [u for u in links if u.startswith(f"{reports}/dashboard/")]
        assert any(u.endswith(run_path(row["job_id"])) for u in into), text[:600]
        for url in into:
            assert Path(unquote(urlsplit(url).path)).is_file(), url
            checked += 1
    assert checked >= 2 * len(rows)  # the run page, the overview, the cells' pages


def test_every_relative_link_of_every_page_resolves(site: Path) -> None:
    pages = list((site / "dashboard").rglob("*.html"))
    assert len([p for p in pages if p.name == "index.html" and "runs" in p.parts]) == 3
    assert broken_links(site / "dashboard") == []


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    """The control: the checker does see a link to a page that was never written."""
    (tmp_path / "a.html").write_text('<a href="cells/x.html">x</a><a href="b.html">b</a>')
    (tmp_path / "b.html").write_text('<a href="https://github.com/">gh</a>')
    assert broken_links(tmp_path) == ["a.html -> cells/x.html"]


def test_a_run_page_in_chromium(history: Store, site: Path, tmp_path: Path) -> None:
    if shutil.which("chromium") is None:
        pytest.skip("chromium is not installed (.ci/setup-chromium installs it): the run page "
                    "is checked by the HTML link test only")
    row = history.history()[0]
    page = site / "dashboard" / run_path(row["job_id"])
    done = _chromium(["--dump-dom"], page, tmp_path / "profile")
    assert done.returncode == 0, done.stderr[-2000:]
    assert _console(done.stderr) == []
    dom = done.stdout
    assert "data-pwned" not in dom  # the planted model name and repository stayed text
    for section in ("comment", "cells", "witnesses", "correctness", "box-time"):
        assert f'id="{section}"' in dom, section
    assert row["verdict"]["headline"] in dom
    assert '<a href="verdict.json">verdict.json</a>' in dom
    assert '<a href="results.json">results.json</a>' in dom
    stages = dom.split('id="box-time"')[1]
    assert "measuring" in stages and "total" in stages
    assert "<table>" in dom.split('id="comment"')[1].split('id="cells"')[0]  # the comment's table
