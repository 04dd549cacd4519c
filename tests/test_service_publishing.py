"""Publishing never blocks on one PR (issue 34): errors handled by class, one sticky comment.

Real verdicts (the stub engine measured by the real harness, graded) in a real SQLite store,
published by the workers' sweep through the real publisher and unmodified PyGithub to the fake
GitHub. Assertions are on the final state of the fake and the store.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.redact import Redactor
from evalbot.config.settings import Config
from evalbot.github.port import GitHubPort
from evalbot.github.service import make_publisher, publish_finished
from evalbot.service.publishing import publish_pending
from evalbot.service.status import snapshot
from evalbot.store.jobs import Store
from tests.github.accounts import BOT, MAINTAINER, fast_backoff
from tests.github.fake_github import REPO, FakeGitHub, Fault, Pull
from tests.graded_history import measure, record
from tests.stub_engine import make_repo

pytest_plugins = ["tests.github.fixtures"]
LOCKED = "Unable to create comment because issue is locked."


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, dict[str, Any],
                                                                  dict[str, Any]]:
    root = tmp_path_factory.mktemp("engine")
    repo, main, shas = make_repo(root / "repo", {"faster": {"decode": 1300.0,
                                                             "prefill": 1.3e6}})
    results, verdict = measure(repo, main, shas["faster"], root / "job")
    return main, shas["faster"], results, verdict


def finished(store: Store, fake: FakeGitHub, number: int,
             measured: tuple[str, str, dict[str, Any], dict[str, Any]]) -> str:
    main, head, results, verdict = measured
    fake.add_pull(Pull(number, head, main, MAINTAINER))
    return record(store, REPO, number, main, head, results, verdict)


def publisher_for(config: Config, port: GitHubPort) -> Any:
    publisher = make_publisher(config, port, fast_backoff())

    def publish(store: Store, job_id: str) -> None:
        publish_finished(store, publisher, job_id, Redactor())
    return publish


def stickies(fake: FakeGitHub, number: int) -> list[str]:
    return [c["body"] for c in fake.comments_on(number) if c["author"] == BOT]


def test_a_locked_pr_is_given_up_at_once_and_the_next_pr_is_published(
        config: Config, port: GitHubPort, fake: FakeGitHub,
        measured: tuple[str, str, dict[str, Any], dict[str, Any]]) -> None:
    store = Store(config.store)
    locked = finished(store, fake, 6, measured)  # the oldest: first in the sweep
    flaky = finished(store, fake, 8, measured)
    fine = finished(store, fake, 7, measured)
    fake.inject(Fault("issues/create-comment", 403, message=LOCKED, times=10**6,
                      where="/issues/6/"))
    fake.inject(Fault("issues/create-comment", 502, times=10**6, where="/issues/8/"))
    publish = publisher_for(config, port)
    lines = publish_pending(store, publish, "w1")
    assert [line.split(": ", 1)[1].split(" in ")[0] for line in lines] == [
        f"given up: GitHub refused (403): {LOCKED}", "retry", "published"]
    assert len(stickies(fake, 7)) == 1 and fake.state.statuses[measured[1]][-1]["state"] \
        == "success"
    assert stickies(fake, 6) == [] and stickies(fake, 8) == []
    assert store.given_up() == [(locked, 6, f"GitHub refused (403): {LOCKED}")]
    assert store.unpublished()[0].id == flaky  # waits out its back-off, not given up
    locked_calls = sum(1 for _m, op, s in fake.log if op == "issues/create-comment" and s == 403)
    assert locked_calls == 1  # a 403 without rate-limit headers is not retried
    assert publish_pending(store, publish, "w1") == []  # nothing due: 8 is backing off
    unpublished = snapshot(store, config.boxes, 5)["unpublished"]
    assert unpublished == [{"job": locked, "pr": 6, "reason": f"GitHub refused (403): {LOCKED}"}]
    assert {j.id for j in store.unpublished()} == {flaky} and fine not in str(unpublished)
    store.close()


def test_a_pr_claimed_by_one_writer_is_not_written_by_another(
        config: Config, port: GitHubPort, fake: FakeGitHub,
        measured: tuple[str, str, dict[str, Any], dict[str, Any]]) -> None:
    store, other = Store(config.store), Store(config.store)
    job = finished(store, fake, 9, measured)
    assert store.claim(f"{REPO}#9", "serve-worker")
    assert publish_pending(other, publisher_for(config, port), "second-worker") == []
    assert stickies(fake, 9) == []
    assert not other.claim(f"{REPO}#9", "second-worker")
    store.unclaim(f"{REPO}#9", "serve-worker")  # let go: the next sweep publishes
    assert publish_pending(other, publisher_for(config, port), "second-worker") == [
        f"{job}: published"]
    store.close()
    other.close()


def test_two_workers_and_a_deleted_comment_leave_one_sticky_comment(
        config: Config, port: GitHubPort, fake: FakeGitHub,
        measured: tuple[str, str, dict[str, Any], dict[str, Any]]) -> None:
    setup = Store(config.store)
    job = finished(setup, fake, 10, measured)
    publish = publisher_for(config, port)
    assert publish_pending(setup, publish, "w0") == [f"{job}: published"]
    [cid] = [c for c, v in fake.state.comments.items() if v["issue"] == 10]
    del fake.state.comments[cid]  # a person deletes the bot's comment ...
    setup.mark_unpublished(job)  # ... and the verdict has news (a re-grade, main moved)
    setup.close()
    go = threading.Barrier(2)
    results: list[list[str]] = []

    def sweep(name: str) -> None:
        store = Store(config.store)
        go.wait(timeout=60)
        results.append(publish_pending(store, publisher_for(config, port), name))
        store.close()

    threads = [threading.Thread(target=sweep, args=(n,)) for n in ("serve", "worker")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(len(r) for r in results) == [0, 1]  # one claimed it, the other skipped it
    assert len(stickies(fake, 10)) == 1


def test_a_sweep_that_listed_a_job_another_published_meanwhile_skips_it(
        config: Config, port: GitHubPort, fake: FakeGitHub,
        measured: tuple[str, str, dict[str, Any], dict[str, Any]]) -> None:
    """The interleaving the two-worker race above can hit under load, pinned: worker B lists the
    job, worker A publishes it whole (claim, publish, mark, let go), then B takes the claim. B
    finds it published inside its claim and writes nothing to the PR."""
    a, b = Store(config.store), Store(config.store)
    job = finished(a, fake, 11, measured)
    listed = b.due_unpublished()
    assert listed == [job] and publish_pending(a, publisher_for(config, port), "a") == [
        f"{job}: published"]
    writes = len(fake.state.comments), sum(len(v) for v in fake.state.statuses.values())
    b.due_unpublished = lambda now=None: listed  # type: ignore[method-assign]
    assert publish_pending(b, publisher_for(config, port), "b") == []
    assert (len(fake.state.comments), sum(len(v) for v in fake.state.statuses.values())) == writes
    a.close()
    b.close()


def test_a_create_that_timed_out_but_was_stored_is_found_before_another_create(
        config: Config, fake: FakeGitHub, tmp_path: Path,
        measured: tuple[str, str, dict[str, Any], dict[str, Any]]) -> None:
    from evalbot.github.pygithub_client import PyGithubPort

    impatient = PyGithubPort(REPO, fake.token, fake.api_url, throttle=False,  # type: ignore[attr-defined]
                             timeout_s=1)
    store = Store(config.store)
    job = finished(store, fake, 11, measured)
    fake.inject(Fault("issues/create-comment", 0, after_commit=True, delay_s=3.0))
    assert publish_pending(store, publisher_for(config, impatient), "w0") == [
        f"{job}: published"]
    assert len(stickies(fake, 11)) == 1
    assert fake.calls("issues/create-comment") <= 1  # the stored one was found by its marker
    store.close()
