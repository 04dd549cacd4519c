"""The pending comment says where the job is (issue 48, point 8).

Signed deliveries through the running service to the fake GitHub (unmodified PyGithub): each
queued PR's comment gives its place in the queue and an estimate from the box time of the
store's recent evaluations; when a worker takes the job (the worker's own start hook, as `evalbot
serve` and `evalbot worker` install it), the comment names the box and links the run's page on
the dashboard and the Actions run, and the dashboard writes that page. A head pushed while the
older one starts keeps its own comment.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.settings import Config, load_config
from evalbot.github.service import Running
from evalbot.grading.grade import grade
from evalbot.report.dashboard import build_site
from evalbot.service.serve import ActionsRun, runtime
from evalbot.store.jobs import Store
from tests.github import payloads
from tests.github.accounts import BOT, MAINTAINER
from tests.github.fake_github import REPO, FakeGitHub, Pull
from tests.github.sender import Sender, settle
from tests.test_grading import DEFAULT

pytest_plugins = ["tests.github.fixtures"]
A, B, C = "a" * 40, "b" * 40, "c" * 40
MAIN = "d" * 40
REPORTS = "https://reports.example/evalbot"
ACTIONS_RUN = "https://github.example/acme/engine/actions/runs/77"
PAST_BOX_S = (60.0, 90.0, 120.0, 600.0, 30.0)  # median 90 s = "1 min 30 s"
RESULTS = Path(__file__).parent / "data" / "llamacpp" / "h200-speedup-witness-fa-off.results.json"


@pytest.fixture
def config(config: Config) -> Config:
    """tests/github/fixtures.py's config, with the reports published under REPORTS."""
    config.source.write_text(config.source.read_text() + f"service:\n  reports_url: {REPORTS}\n")
    return load_config(config.source)


@pytest.fixture
def past(config: Config) -> Iterator[Store]:
    """Five evaluations of another PR stored, their box times PAST_BOX_S."""
    store = Store(config.store)
    doc = json.loads(RESULTS.read_text())
    for n, seconds in enumerate(PAST_BOX_S):
        results = copy.deepcopy(doc)
        results["timing"] = {"total_s": seconds}
        job = store.enqueue(REPO, 9, f"{n:040x}", DEFAULT.ident, base_sha=MAIN)
        assert store.lease("w0", 600) is not None
        assert store.finish(job.id, "w0", grade(results, DEFAULT), results)
    yield store
    store.close()


def opened(running: Running, send: Sender, fake: FakeGitHub, number: int, head: str,
           handled: int) -> None:
    fake.add_pull(Pull(number, head, MAIN, MAINTAINER))
    send.post("pull_request", payloads.pull_request("opened", number=number, head_sha=head,
                                                    base_sha=MAIN, author=MAINTAINER))
    settle(running, handled)


def body(fake: FakeGitHub, number: int) -> str:
    [comment] = [c for c in fake.comments_on(number) if c["author"] == BOT]
    return str(comment["body"])


def note(fake: FakeGitHub, number: int) -> str:
    """The pending comment's note: the paragraph under its heading."""
    return body(fake, number).split("\n\n")[1]


def started(config: Config, fake: FakeGitHub, store: Store) -> Any:
    """A worker's lease of the fairest job, then its start hook, as Worker.step runs them."""
    job = store.lease("w1", 600, box="local")
    assert job is not None
    hook = ActionsRun(runtime(config.source, token=fake.token), ACTIONS_RUN)  # type: ignore[attr-defined]
    hook.started(job, "local")
    return job


def test_queued_comments_give_the_place_and_an_estimate_then_the_run(
        bot: tuple[Running, Sender, Store], fake: FakeGitHub, config: Config, past: Store,
        tmp_path: Path) -> None:
    running, send, store = bot
    opened(running, send, fake, 2, A, 1)
    assert note(fake, 2) == (
        "Queued for evaluation: next in the queue: nothing is running or queued before it. "
        "Recent evaluations took 1 min 30 s of box time each (median of the last 5): its "
        "verdict comes about 1 min 30 s from now.")
    opened(running, send, fake, 3, B, 2)
    assert note(fake, 3) == (
        "Queued for evaluation: 0 running and 1 queued before it (the queue takes authors and "
        "PRs in turn, so it may start sooner). Recent evaluations took 1 min 30 s of box time "
        "each (median of the last 5): it starts in at most about 1 min 30 s on one box, and "
        "its verdict comes about 3 min 0 s from now.")

    job = started(config, fake, store)
    assert job.pr == 2
    page = f"{REPORTS}/dashboard/runs/{job.id}/index.html"
    text = note(fake, 2)
    assert re.fullmatch(
        r"Running on box `local` since \d\d:\d\d UTC \(attempt 1\); "
        rf"\[its run page\]\({re.escape(page)}\) · \[the Actions run\]\({re.escape(ACTIONS_RUN)}\)"
        r"\. Its run page shows the verdict once it is in\.", text), text
    assert "**running**" in body(fake, 2)
    assert fake.state.statuses[A][-1]["state"] == "pending"
    assert fake.state.statuses[A][-1]["target_url"] == ACTIONS_RUN  # `/evalbot cancel` finds it
    # PR 3 is now behind a running job
    opened(running, send, fake, 4, C, 3)
    assert "1 running and 1 queued before it" in note(fake, 4)

    site = tmp_path / "site"  # the page the comment links is written with the dashboard
    build_site(store, site)
    written = (site / "runs" / job.id / "index.html").read_text(encoding="utf-8")
    assert "Running on box <code>local</code>" in written


def test_a_newer_push_keeps_its_own_comment_when_the_older_head_starts(
        bot: tuple[Running, Sender, Store], fake: FakeGitHub, config: Config) -> None:
    running, send, store = bot
    opened(running, send, fake, 2, A, 1)
    job = store.lease("w1", 600, box="local")  # the worker took A ...
    assert job is not None and job.head_sha == A
    fake.state.pulls[2].head_sha = C  # ... as C was pushed and handled
    send.post("pull_request", payloads.pull_request("synchronize", number=2, head_sha=C,
                                                    base_sha=MAIN, author=MAINTAINER))
    settle(running, 2)
    before = body(fake, 2)
    assert C[:10] in before
    hook = ActionsRun(runtime(config.source, token=fake.token), ACTIONS_RUN)  # type: ignore[attr-defined]
    hook.started(job, "local")  # the old head's start hook runs late
    assert body(fake, 2) == before  # C's comment stays; A's start says nothing
    assert "Running on box" not in body(fake, 2)


def test_without_a_stored_evaluation_the_estimate_says_so(
        bot: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, _ = bot
    opened(running, send, fake, 2, A, 1)
    assert note(fake, 2).endswith(
        "No evaluation of this repository is stored yet to estimate its time from.")
