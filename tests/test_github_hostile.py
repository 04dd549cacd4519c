"""The GitHub side against hostile commenters, poison deliveries and GitHub's own failures.

Everything goes over real HTTP: signed deliveries to the running waitress server, unmodified
PyGithub to the fake GitHub (OpenAPI-checked). Each test asserts final state on the fake.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from evalbot.config.settings import Config, load_config
from evalbot.github.port import GitHubPort, RateLimited
from evalbot.github.publish import Backoff
from evalbot.github.service import Running, make_publisher, start
from evalbot.store.jobs import Store
from tests.github import payloads
from tests.github.accounts import BOT, MAINTAINER, OUTSIDER, fast_backoff
from tests.github.fake_github import FakeGitHub, Fault, Pull
from tests.github.sender import Sender, settle

A, B, C = "a" * 40, "b1" * 20, "c" * 40
APPROVED = "evalbot-approved"
TRIAGER = "tria-ger"  # GitHub reports "triage" (or "read") for this role: no write access

pytest_plugins = ["tests.github.fixtures"]

# GitHub links @login and @org/team where `@` follows a non-word character, outside code.
_MENTION = re.compile(r"(?<![A-Za-z0-9_`])@[A-Za-z0-9][A-Za-z0-9-]*(?:/[A-Za-z0-9_.-]+)?")


def live_mentions(markdown: str) -> list[str]:
    """Mentions and raw HTML a CommonMark parser finds outside code (entities decoded); the
    bot's own hidden marker lines are the one HTML allowed."""
    found: list[str] = []
    for token in MarkdownIt("commonmark").enable("table").parse(markdown):
        if token.type == "html_block" and not token.content.startswith("<!-- evalbot:"):
            found.append(token.content.strip())
        for child in token.children or []:
            if child.type == "text":
                found += _MENTION.findall(child.content)
            elif child.type == "html_inline":
                found.append(child.content)
    return found


def bot_texts(fake: FakeGitHub) -> list[str]:
    return [c["body"] for c in fake.state.comments.values() if c["author"] == BOT]


def jobs(store: Store) -> list[tuple[int | None, str, str]]:
    return [(j.pr, j.head_sha, j.state) for j in store.jobs()]


def comment(number: int, body: str, author: str, pr_author: str, cid: int) -> dict[str, object]:
    return payloads.pr_comment(number=number, body=body, author=author, pr_author=pr_author,
                               comment_id=cid)


# ---- 1. no live mention in anything the bot writes ---------------------------------------------
def test_the_mention_checker_sees_what_github_would_link() -> None:
    assert live_mentions("`x`@octo-org/everyone`") == ["@octo-org/everyone"]  # the old echo
    assert live_mentions("hi &#64;octocat") == ["@octocat"]
    assert live_mentions("x <img src=x>") == ["<img src=x>"]
    assert live_mentions("`@octocat` and @\u200boctocat and a@b.c") == []


def test_no_reply_or_comment_carries_a_live_mention(bot: tuple[Running, Sender, Store],
                                                    fake: FakeGitHub) -> None:
    running, send, store = bot
    fake.add_pull(Pull(3, A, "b" * 40, OUTSIDER, fork=True))
    hostile = ["/evalbot x`@octo-org/everyone<img src=x onerror=alert(1)>",
               "/evalbot rerun @octo-org/everyone",
               "/evalbot &#64;octo-org/everyone",
               "/evalbot ```@octo-org/everyone <b>hi</b>"]
    for i, text in enumerate(hostile):  # the fork's author commands their own PR
        send.post("issue_comment", comment(3, text, OUTSIDER, OUTSIDER, 7000 + i))
    # A maintainer's cancel writes their login into the sticky comment.
    fake.add_pull(Pull(8, C, "b" * 40, MAINTAINER))
    send.post("pull_request", payloads.pull_request("opened", number=8, head_sha=C,
                                                    author=MAINTAINER))
    send.post("issue_comment", comment(8, "/evalbot cancel", MAINTAINER, MAINTAINER, 7100))
    settle(running, len(hostile) + 2)
    replies = [c["body"] for c in fake.comments_on(3)]
    assert len(replies) == len(hostile), replies
    assert all("octo-org/everyone" in r for r in replies)  # echoed, but inert
    for text in bot_texts(fake):
        assert live_mentions(text) == [], text
    [sticky] = [c["body"] for c in fake.comments_on(8)]
    assert "Cancelled by @\u200bCodertocat" in sticky


# ---- 2. one reply when GitHub answers 502 after storing it ---------------------------------------
def test_help_after_two_502s_that_stored_the_comment_is_posted_once(
        bot: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, _store = bot
    fake.add_pull(Pull(6, A, "b" * 40, MAINTAINER))
    fake.inject(Fault("issues/create-comment", 502, after_commit=True, times=2))
    send.post("issue_comment", comment(6, "/evalbot help", MAINTAINER, MAINTAINER, 7200))
    assert settle(running, 1)[-1].endswith(": help")
    # A redelivery of the same command (GitHub's "Redeliver" with a new id) answers nothing new.
    send.post("issue_comment", comment(6, "/evalbot help", MAINTAINER, MAINTAINER, 7200))
    settle(running, 2)
    helps = [c["body"] for c in fake.comments_on(6)]
    assert len(helps) == 1 and helps[0].startswith("### evalbot commands"), helps
    assert fake.calls("issues/create-comment") == 1


def test_a_refusal_survives_a_delivery_that_failed_and_is_posted_once(
        bot: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, _store = bot
    fake.add_pull(Pull(6, A, "b" * 40, MAINTAINER))
    fake.add_user("Octocat", "read")
    # Every create of the first handling fails (nothing stored): the delivery is tried again.
    fake.inject(Fault("issues/create-comment", 502, times=5))
    send.post("issue_comment", comment(6, "/evalbot rerun", "Octocat", MAINTAINER, 7250))
    assert settle(running, 1, timeout_s=60)[-1].endswith(": refused Octocat")
    send.post("issue_comment", comment(6, "/evalbot cancel", "Octocat", MAINTAINER, 7251))
    assert settle(running, 2)[-1].endswith(": refused Octocat (already told)")
    [refusal] = [c["body"] for c in fake.comments_on(6)]
    assert refusal.startswith("@\u200bOctocat sorry, evalbot takes commands only from")
    assert fake.calls("issues/create-comment") == 6


# ---- 3. no request before Retry-After (or the rate limit's reset) has passed --------------------
class VirtualClock:
    """The bot's clock and sleep in one: sleeping moves time on at once."""

    def __init__(self) -> None:
        self.now, self._lock = 1000.0, threading.Lock()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


@pytest.fixture
def clocked_bot(config: Config, port: GitHubPort, fake: FakeGitHub
                ) -> Iterator[tuple[Running, Sender, VirtualClock]]:
    clock = VirtualClock()
    fake.clock = clock
    secret = secrets.token_bytes(32)
    running = start(config, secret, port, backoff=Backoff(transient_wait_s=0.05, clock=clock,
                                                          sleep=clock.sleep))
    yield running, Sender(f"http://127.0.0.1:{running.port}/", secret), clock
    running.stop()


def _quiet_after_limit(fake: FakeGitHub, status: int, wait_s: float) -> None:
    """Every request after the rate-limited one came at least wait_s later (virtual time)."""
    i = next(i for i, (_t, _op, s) in enumerate(fake.stamps) if s == status)
    limited, later = fake.stamps[i][0], fake.stamps[i + 1:]
    assert later and all(t >= limited + wait_s for t, _op, _s in later), (limited, later)


@pytest.mark.parametrize(("op", "status", "headers", "wait_s"), [
    ("issues/create-comment", 429, {"Retry-After": "3600"}, 3600.0),
    ("repos/get-collaborator-permission-level", 403,
     {"x-ratelimit-remaining": "0", "x-ratelimit-limit": "5000"}, 1799.0),
])
def test_no_request_before_githubs_deadline(clocked_bot: tuple[Running, Sender, VirtualClock],
                                            fake: FakeGitHub, op: str, status: int,
                                            headers: dict[str, str], wait_s: float) -> None:
    running, send, clock = clocked_bot
    if "x-ratelimit-remaining" in headers:  # the primary limit: reset is an epoch second
        headers = {**headers, "x-ratelimit-reset": str(int(time.time()) + 1800)}
    fake.add_pull(Pull(6, A, "b" * 40, MAINTAINER))
    fake.inject(Fault(op, status, headers=headers, message="API rate limit exceeded"))
    send.post("issue_comment", comment(6, "/evalbot help", MAINTAINER, MAINTAINER, 7300))
    assert settle(running, 1)[-1].endswith(": help")
    _quiet_after_limit(fake, status, wait_s)
    assert clock.now >= 1000.0 + wait_s
    assert len(fake.comments_on(6)) == 1
    assert fake.calls(op) == 2  # the limited call and one after the deadline: no polling


def test_a_limit_seen_by_one_publisher_holds_back_the_others(config: Config, port: GitHubPort,
                                                            fake: FakeGitHub) -> None:
    assert make_publisher(config, port).backoff is make_publisher(config, port).backoff
    clock = VirtualClock()
    fake.clock = clock
    shared = Backoff(clock=clock, sleep=clock.sleep)
    dispatcher_side, worker_side = (make_publisher(config, port, shared) for _ in range(2))
    fake.inject(Fault("repos/create-commit-status", 429, headers={"Retry-After": "3600"},
                      message="API rate limit exceeded"))
    with pytest.raises(RateLimited):
        dispatcher_side.status(A, "pending", "queued")
    with pytest.raises(RateLimited):  # the other one does not even try
        worker_side.status(A, "success", "done")
    assert fake.calls("repos/create-commit-status") == 1
    clock.sleep(3600)
    worker_side.status(A, "success", "done")
    assert [s["state"] for s in fake.state.statuses[A]] == ["success"]
    _quiet_after_limit(fake, 429, 3600.0)


# ---- 4. a poison delivery is set aside, the next one handled ------------------------------------
def test_poison_delivery_refused_at_the_edge_and_set_aside_in_the_inbox(
        bot: tuple[Running, Sender, Store], config: Config, fake: FakeGitHub,
        caplog: pytest.LogCaptureFixture) -> None:
    running, send, store = bot
    poison = payloads.pull_request("synchronize", number=2, head_sha=A, author=MAINTAINER)
    poison["pull_request"]["head"]["sha"] = 12345
    r = send.post("pull_request", poison)
    assert (r.status_code, r.text.strip()) == (400, "payload field head.sha is not a full "
                                                    "commit SHA")
    # The same payload stored by an older evalbot, which did not check types, is first in line.
    assert store.inbox_put("poison-1", "pull_request", json.dumps(poison).encode())
    caplog.set_level(logging.ERROR, logger="evalbot.github")
    good = payloads.pull_request("synchronize", number=2, head_sha=B, author=MAINTAINER)
    assert send.post("pull_request", good).status_code == 202
    lines = settle(running, 2)
    assert lines[0] == "poison-1: set aside: bad payload: payload field head.sha is not a full " \
                       "commit SHA"
    assert lines[1].endswith(f"queued job {store.jobs()[0].id} for {B[:10]} (attempt 1)")
    assert jobs(store) == [(2, B, "queued")]
    assert [d for d, _e, _err in store.inbox_aside()] == ["poison-1"]
    assert store.inbox_next() is None
    assert any("poison-1" in rec.getMessage() and "set aside" in rec.getMessage()
               for rec in caplog.records)


# ---- 5. approval: write access only, and only for the head it was given for --------------------
def _labeled(number: int, sha: str, sender: str) -> dict[str, object]:
    return payloads.pull_request("labeled", number=number, head_sha=sha, author=OUTSIDER,
                                 sender=sender, fork=True, labels=(APPROVED,), label=APPROVED)


def test_approval_counts_from_write_access_and_for_its_head_only(
        bot: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, store = bot
    fake.add_user(TRIAGER, "triage")
    fake.add_pull(Pull(3, A, "b" * 40, OUTSIDER, fork=True), [APPROVED])
    send.post("pull_request", _labeled(3, A, TRIAGER))
    settle(running, 1)
    assert jobs(store) == [] and fake.labels_on(3) == set()
    [refusal] = fake.comments_on(3)
    assert f"@\u200b{TRIAGER}" in refusal["body"] and "write access" in refusal["body"]
    fake.state.issue_labels[3] = [APPROVED]  # a maintainer applies it for head A
    send.post("pull_request", _labeled(3, A, MAINTAINER))
    settle(running, 2)
    assert jobs(store) == [(3, A, "queued")]
    # The fork pushes B: the label is still on, but it approved A.
    fake.state.pulls[3].head_sha = B
    send.post("pull_request", payloads.pull_request(
        "synchronize", number=3, head_sha=B, author=OUTSIDER, fork=True, labels=(APPROVED,)))
    settle(running, 3)
    assert jobs(store) == [(3, A, "queued")]
    assert APPROVED not in fake.labels_on(3)  # taken off, so a maintainer can apply it again
    assert "approval was for an earlier head" in fake.state.statuses[B][-1]["description"]
    fake.state.issue_labels[3].append(APPROVED)
    send.post("pull_request", _labeled(3, B, MAINTAINER))
    settle(running, 4)
    assert jobs(store) == [(3, A, "superseded"), (3, B, "queued")]


def test_approve_later_pushes_keeps_an_approval_across_pushes(
        tmp_path: Path, config: Config, port: GitHubPort, fake: FakeGitHub) -> None:
    text = config.source.read_text().replace("github:\n", "github:\n  approve_later_pushes: true\n")
    (tmp_path / "later.yaml").write_text(text)
    secret = secrets.token_bytes(32)
    running = start(load_config(tmp_path / "later.yaml"), secret, port, backoff=fast_backoff())
    send, store = Sender(f"http://127.0.0.1:{running.port}/", secret), Store(config.store)
    try:
        fake.add_pull(Pull(3, A, "b" * 40, OUTSIDER, fork=True), [APPROVED])
        send.post("pull_request", _labeled(3, A, MAINTAINER))
        settle(running, 1)
        fake.state.pulls[3].head_sha = C  # the fork pushes C
        send.post("pull_request", payloads.pull_request(
            "synchronize", number=3, head_sha=C, author=OUTSIDER, fork=True, labels=(APPROVED,)))
        settle(running, 2)
        assert jobs(store) == [(3, A, "superseded"), (3, C, "queued")]
        assert APPROVED in fake.labels_on(3)
    finally:
        store.close()
        running.stop()


# ---- 6. slow clients and the content type ---------------------------------------------------------
def test_200_slow_clients_leave_real_deliveries_answered(bot: tuple[Running, Sender, Store],
                                                         fake: FakeGitHub) -> None:
    import socket

    running, send, store = bot
    dribblers = []
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", running.port), timeout=10)
        s.sendall(b"POST / HTTP/1.1\r\nHost: bot\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100000\r\n\r\n{")
        dribblers.append(s)
    stop = threading.Event()

    def dribble() -> None:  # one byte per connection per 0.2 s: never idle, never done
        while not stop.wait(0.2):
            for s in dribblers:
                try:
                    s.send(b" ")
                except OSError:
                    pass

    thread = threading.Thread(target=dribble, daemon=True)
    thread.start()
    try:
        answers = [send.post("pull_request", payloads.pull_request(
            "synchronize", number=20 + i, head_sha=f"{i:040x}", author=MAINTAINER)).status_code
            for i in range(10)]
        assert answers == [202] * 10
        lines = settle(running, 10)  # handled, too (the config's author quota admits 3)
        assert sum("queued job" in line for line in lines) == 3
        assert sum("author quota reached" in line for line in lines) == 7
    finally:
        stop.set()
        thread.join(timeout=10)
        for s in dribblers:
            s.close()


def test_content_type_must_be_json_and_the_answer_names_the_setting(
        bot: tuple[Running, Sender, Store], config: Config) -> None:
    from evalbot.github.webhook import signature

    _running, send, store = bot
    body = json.dumps(payloads.pull_request("synchronize", number=2, head_sha=A,
                                            author=MAINTAINER)).encode()
    form = b"payload=" + body  # what GitHub sends with "application/x-www-form-urlencoded"
    r = send.http.post(send.url, data=form, timeout=10, headers={
        "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "d-form",
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Hub-Signature-256": signature(send.secret, form)})
    assert r.status_code == 415
    assert '"Content type" to application/json' in r.text
    assert store.inbox_next() is None and store.jobs() == []
