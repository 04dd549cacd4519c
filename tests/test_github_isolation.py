"""One bad PR never stalls the others (issue 34), tried as GitHub and an unkind world would.

Signed deliveries over real HTTP to the running service, unmodified PyGithub to the fake GitHub
(OpenAPI-checked), state in a real SQLite file. Every test waits on state with a generous
deadline and asserts the final state: comments, labels, statuses, job rows, the inbox.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator

import pytest

from evalbot.config.settings import Config
from evalbot.github.port import GitHubPort
from evalbot.github.service import Running, start
from evalbot.store.jobs import Store
from tests.github import payloads
from tests.github.accounts import MAINTAINER, fast_backoff
from tests.github.fake_github import FakeGitHub, Fault, Pull
from tests.github.sender import Sender

A, B, C = "a" * 40, "b1" * 20, "c" * 40
BASE = "b" * 40

pytest_plugins = ["tests.github.fixtures"]


def wait_for(what: Callable[[], object], timeout_s: float = 90.0) -> None:
    """Wait on a state, never on a fixed sleep; the deadline is for a stuck service only."""
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "the state never came"
        time.sleep(0.02)


@pytest.fixture
def quick(config: Config, port: GitHubPort) -> Iterator[tuple[Running, Sender, Store]]:
    """The service with a short first back-off for deliveries (the cap stays five minutes)."""
    secret = secrets.token_bytes(32)
    running = start(config, secret, port, backoff=fast_backoff(), retry_s=0.2)
    store = Store(config.store)
    yield running, Sender(f"http://127.0.0.1:{running.port}/", secret), store
    store.close()
    running.stop()


def pending_published(fake: FakeGitHub, number: int, sha: str) -> bool:
    statuses = fake.state.statuses.get(sha, [])
    return bool(statuses) and statuses[-1]["state"] == "pending" \
        and "queued" in statuses[-1]["description"] and len(fake.comments_on(number)) == 1


def handled(running: Running, delivery: str) -> bool:
    return any(line.startswith(f"{delivery}: ") for line in running.dispatcher.done)


def jobs(store: Store) -> list[tuple[int | None, str, str]]:
    return [(j.pr, j.head_sha, j.state) for j in store.jobs()]


# ---- 1. the inbox: a PR whose comments answer 5xx holds no other PR ---------------------------
def test_a_pr_that_keeps_failing_delays_only_its_own_deliveries(
        quick: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, store = quick
    fake.add_pull(Pull(6, A, BASE, MAINTAINER))
    fake.add_pull(Pull(7, C, BASE, MAINTAINER))
    broken = Fault("issues/list-comments", 502, times=10**6, where="/issues/6/")
    fake.inject(broken)
    first = "d-help-6"
    send.post("issue_comment", payloads.pr_comment(number=6, body="/evalbot help",
                                                   author=MAINTAINER, comment_id=9001),
              delivery=first)
    wait_for(lambda: store.inbox_tries(first) >= 1)
    # PR 6's next command waits behind its first (one PR's events stay in order) ...
    send.post("issue_comment", payloads.pr_comment(number=6, body="/evalbot rerun",
                                                   author=MAINTAINER, comment_id=9002),
              delivery="d-rerun-6")
    # ... while another PR's push is handled and published.
    send.post("pull_request", payloads.pull_request("opened", number=7, head_sha=C,
                                                    author=MAINTAINER), delivery="d-open-7")
    wait_for(lambda: handled(running, "d-open-7"))
    assert pending_published(fake, 7, C)
    assert fake.labels_on(7) == {"eval:pending"}
    assert jobs(store) == [(7, C, "queued")]
    assert fake.comments_on(6) == []
    assert store.inbox_counts()["waiting"] == 2  # both of PR 6's, none set aside
    tries = store.inbox_tries(first)
    wait_for(lambda: store.inbox_tries(first) > tries)  # the faulty PR keeps failing ...
    assert store.inbox_tries("d-rerun-6") == 0  # ... and its second delivery is never tried
    broken.times = 0  # GitHub heals: PR 6's deliveries are handled, in order
    wait_for(lambda: store.inbox_counts()["waiting"] == 0)
    assert [line.split(": ", 1)[1] for line in running.dispatcher.done][-2:] == [
        "help", running.dispatcher.done[-1].split(": ", 1)[1]]
    assert running.dispatcher.done[-2].startswith(f"{first}: help")
    assert "queued job" in running.dispatcher.done[-1]
    assert sorted(jobs(store)) == [(6, A, "queued"), (7, C, "queued")]
    bodies = [c["body"] for c in fake.comments_on(6)]
    assert len(bodies) == 2 and sum(b.startswith("### evalbot commands") for b in bodies) == 1
