"""The webhook over real HTTP (waitress), with GitHub's example payloads signed by the test."""

from __future__ import annotations

import json
import sqlite3

import pytest

from evalbot.config.settings import Config
from evalbot.github.service import Running
from evalbot.github.webhook import MAX_BODY, signature
from evalbot.store.jobs import Store
from tests.github import payloads
from tests.github.accounts import MAINTAINER
from tests.github.fake_github import FakeGitHub
from tests.github.sender import Sender, settle

SHA = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"

pytest_plugins = ["tests.github.fixtures"]


@pytest.fixture
def service(bot: tuple[Running, Sender, Store]) -> tuple[Running, Sender]:
    running, sender, _ = bot
    return running, sender


def test_signature_matches_githubs_published_test_vector() -> None:
    assert signature(b"It's a Secret to Everybody", b"Hello, World!") == \
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def _inbox(config: Config) -> int:
    return sqlite3.connect(config.store).execute("SELECT COUNT(*) FROM deliveries").fetchone()[0]


def test_refuses_unsigned_and_badly_signed(service: tuple[Running, Sender],
                                           config: Config) -> None:
    _running, send = service
    body = payloads.pull_request("synchronize", number=2, head_sha=SHA)
    assert send.post("pull_request", body, sign=False).status_code == 401
    assert send.post("pull_request", body, secret=b"not the secret").status_code == 401
    signed_then_changed = json.dumps(body).encode()
    good = signature(send.secret, signed_then_changed)
    tampered = signed_then_changed.replace(SHA.encode(), b"f" * 40)
    r = send.http.post(send.url, data=tampered, timeout=10, headers={
        "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "d-1",
        "X-Hub-Signature-256": good})
    assert r.status_code == 401
    assert _inbox(config) == 0


def test_size_json_and_unhandled_events(service: tuple[Running, Sender],
                                        config: Config) -> None:
    _running, send = service
    assert send.post("pull_request", None, raw=b"x" * (MAX_BODY + 1)).status_code == 413
    assert send.post("pull_request", None, raw=b"{not json").status_code == 400
    assert send.post("ping", payloads.example("ping", None)).status_code == 204
    assigned = payloads.example("pull_request", "assigned")
    assert send.post("pull_request", assigned).status_code == 204
    comment_on_issue = payloads.example("issue_comment", "created", 1)  # an issue, not a PR
    assert send.post("issue_comment", comment_on_issue).status_code == 204
    assert send.http.get(send.url, timeout=10).status_code == 405
    assert _inbox(config) == 0


def test_redelivery_creates_no_second_job(service: tuple[Running, Sender], config: Config,
                                          fake: FakeGitHub) -> None:
    running, send = service
    body = payloads.pull_request("synchronize", number=2, head_sha=SHA, author=MAINTAINER)
    first = send.post("pull_request", body, delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958")
    again = send.post("pull_request", body, delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958")
    assert (first.status_code, again.status_code) == (202, 200)
    settle(running, 1)
    store = Store(config.store)
    assert [(j.pr, j.head_sha, j.state) for j in store.jobs()] == [(2, SHA, "queued")]
    assert len(running.dispatcher.done) == 1
    assert len(fake.comments_on(2)) == 1 and fake.labels_on(2) == {"eval:pending"}
    assert [s["state"] for s in fake.state.statuses[SHA]] == ["pending"]


def test_payload_missing_a_needed_field_names_it(service: tuple[Running, Sender],
                                                 config: Config) -> None:
    _running, send = service
    body = payloads.pull_request("synchronize", number=2, head_sha=SHA)
    del body["pull_request"]["head"]["sha"]
    r = send.post("pull_request", body)
    assert (r.status_code, r.text.strip()) == (400, "payload field head.sha is missing")
    assert _inbox(config) == 0


# ---- issue 47: text that cannot be encoded never passes the edge ---------------------------------
LONE = "\ud800"  # json.dumps writes it as the escape \ud800, as a hostile sender would


def _comment_with(where: tuple[str, ...], key: bool = False) -> dict[str, object]:
    doc = payloads.pr_comment(number=2, body="/evalbot help", author=MAINTAINER)
    node = doc
    for part in where[:-1]:
        node = node[part]
    if key:
        node[LONE] = node.pop(where[-1])
    else:
        node[where[-1]] = f"octo{LONE}cat"
    return doc


@pytest.mark.parametrize(("where", "key", "named"), [
    (("comment", "user", "login"), False, "comment.user.login"),  # the commenter (issue 47)
    (("comment", "body"), False, "comment.body"),
    (("issue", "user", "login"), False, "issue.user.login"),
    (("sender", "login"), False, "sender.login"),
    (("repository", "description"), False, "repository.description"),  # a field evalbot ignores
    (("issue", "title"), True, "issue"),  # a key, not a value
])
def test_a_lone_surrogate_in_any_text_is_refused_at_the_edge(
        service: tuple[Running, Sender], config: Config, where: tuple[str, ...], key: bool,
        named: str) -> None:
    running, send = service
    r = send.post("issue_comment", _comment_with(where, key))
    assert r.status_code == 400 and named in r.text and "lone surrogate" in r.text
    store = Store(config.store)
    assert _inbox(config) == 0 and store.inbox_counts() == {"waiting": 0, "retrying": 0,
                                                            "aside": 0}
    store.close()
    # The edge keeps taking good deliveries; the dispatcher never saw the refused one.
    ok = payloads.pr_comment(number=2, body="/evalbot help", author=MAINTAINER, comment_id=77)
    assert send.post("issue_comment", ok).status_code == 202
    assert settle(running, 1) == [running.dispatcher.done[0]]
    assert running.dispatcher.done[0].endswith(": help")


def test_a_lone_surrogate_in_a_push_is_refused_and_raw_utf8_surrogates_too(
        service: tuple[Running, Sender], config: Config) -> None:
    _running, send = service
    push = payloads.pull_request("synchronize", number=2, head_sha=SHA, author=MAINTAINER,
                                 labels=("ok",))
    push["pull_request"]["labels"][0]["name"] = LONE
    r = send.post("pull_request", push)
    assert r.status_code == 400 and "pull_request.labels.0.name" in r.text
    # The same surrogate as raw bytes (ED A0 80), which Python's JSON decoder also lets through.
    raw = json.dumps(payloads.pull_request("synchronize", number=2, head_sha=SHA,
                                           author="octo-cat")).encode()
    raw = raw.replace(b"octo-cat", b"octo\xed\xa0\x80cat")
    r = send.post("pull_request", None, raw=raw)
    assert r.status_code == 400 and "lone surrogate" in r.text
    assert _inbox(config) == 0


# ---- the inbox's group commit (evalbot.github.inbox_writer) ------------------------------------
def test_deliveries_committed_together_each_get_their_own_answer(config: Config) -> None:
    """Thirty deliveries put at once share commits; one the store refuses fails alone, a
    delivery id sent twice is new once, and every other one is stored."""
    import sqlite3 as sql
    from concurrent.futures import ThreadPoolExecutor

    from evalbot.github.inbox_writer import InboxWriter

    store = Store(config.store)
    store.db.execute("INSERT INTO inbox (delivery, event, body, received) VALUES "
                     "('orphan', 'pull_request', x'7b7d', 0)")  # in the inbox, not in deliveries
    writer = InboxWriter(config.store)
    ids = [f"d{i}" for i in range(28)] + ["d3", "orphan"]

    def put(delivery: str) -> object:
        try:
            return writer.put(delivery, "pull_request", b"{}", f"r#{delivery}")
        except sql.IntegrityError as exc:
            return exc

    with ThreadPoolExecutor(30) as pool:
        got = dict(zip(range(30), pool.map(put, ids), strict=True))
    assert isinstance(got[29], sql.IntegrityError)  # the one the store refused
    assert sorted(got[i] for i in (3, 28)) == [False, True]  # the same id twice: new once
    assert all(got[i] is True for i in range(28) if i != 3)
    stored = {r[0] for r in store.db.execute("SELECT delivery FROM inbox")}
    assert stored == {f"d{i}" for i in range(28)} | {"orphan"}
    store.close()


def test_escaped_surrogate_pairs_and_backslash_text_are_fine(
        service: tuple[Running, Sender], config: Config) -> None:
    """What the edge's fast path must not refuse: an emoji written as its escaped surrogate pair
    (json.dumps' default) and the six characters \\ud800 as text."""
    running, send = service
    body = "/evalbot help\n\N{GRINNING FACE} and the text \\ud800"
    r = send.post("issue_comment", payloads.pr_comment(number=2, body=body, author=MAINTAINER))
    assert r.status_code == 202
    assert settle(running, 1)[0].endswith(": help")
