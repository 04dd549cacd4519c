"""One bad PR never stalls the others (issue 34), tried as GitHub and an unkind world would.

Signed deliveries over real HTTP to the running service, unmodified PyGithub to the fake GitHub
(OpenAPI-checked), state in a real SQLite file. Every test waits on state with a generous
deadline and asserts the final state: comments, labels, statuses, job rows, the inbox.
"""

from __future__ import annotations

import functools
import secrets
import threading

from evalbot.config.settings import Config
from evalbot.github.port import GitHubPort
from evalbot.github.service import Running, start
from evalbot.store.jobs import Store
from tests.github import payloads
from tests.github.accounts import MAINTAINER, OUTSIDER, fast_backoff
from tests.github.fake_github import REPO as REPO_NAME
from tests.github.fake_github import FakeGitHub, Fault, Pull
from tests.github.sender import Sender, jobs
from tests.service_env import wait_for as wait_on

A, B, C = "a" * 40, "b1" * 20, "c" * 40
BASE = "b" * 40

pytest_plugins = ["tests.github.fixtures"]


# a state of the dispatcher, never a fixed sleep; the deadline is for a stuck service only
wait_for = functools.partial(wait_on, "the dispatcher's state", timeout_s=90.0)


def pending_published(fake: FakeGitHub, number: int, sha: str) -> bool:
    statuses = fake.state.statuses.get(sha, [])
    return bool(statuses) and statuses[-1]["state"] == "pending" \
        and "queued" in statuses[-1]["description"] and len(fake.comments_on(number)) == 1


def handled(running: Running, delivery: str) -> bool:
    return any(line.startswith(f"{delivery}: ") for line in running.dispatcher.done)


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


# ---- 3. a stale head is never queued -----------------------------------------------------------
def test_pushes_out_of_order_queue_only_the_current_head(
        quick: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, store = quick
    fake.add_pull(Pull(5, C, BASE, MAINTAINER))  # A was pushed, then C: GitHub's head is C
    send.post("pull_request", payloads.pull_request("synchronize", number=5, head_sha=C,
                                                    author=MAINTAINER), delivery="d-c")
    wait_for(lambda: handled(running, "d-c"))
    send.post("pull_request", payloads.pull_request("synchronize", number=5, head_sha=A,
                                                    author=MAINTAINER), delivery="d-a-late")
    wait_for(lambda: handled(running, "d-a-late"))
    assert jobs(store) == [(5, C, "queued")]
    assert fake.state.statuses[C][-1]["state"] == "pending"
    assert "queued" in fake.state.statuses[C][-1]["description"]
    assert A not in fake.state.statuses
    [sticky] = fake.comments_on(5)
    assert C[:10] in sticky["body"] and A[:10] not in sticky["body"]


def test_inbox_order_is_the_stores_sequence_not_the_clock(config: Config) -> None:
    store = Store(config.store)
    assert store.inbox_put("first", "pull_request", b"{}", "r#1")
    assert store.inbox_put("second", "pull_request", b"{}", "r#2")
    store.db.execute("UPDATE inbox SET received=received-3600 WHERE delivery='second'")
    assert store.inbox_next(0.0) is not None and store.inbox_next(0.0)[0] == "first"  # type: ignore[index]
    store.close()


# ---- 5. an interrupted admission is completed; a reopened PR is evaluated again -------------------
def test_six_502s_on_the_status_write_still_end_with_the_pending_status(
        quick: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, store = quick
    fake.add_pull(Pull(4, A, BASE, MAINTAINER))
    fake.inject(Fault("repos/create-commit-status", 502, times=6))
    send.post("pull_request", payloads.pull_request("opened", number=4, head_sha=A,
                                                    author=MAINTAINER), delivery="d-4")
    wait_for(lambda: handled(running, "d-4"))
    assert running.dispatcher.done[-1].startswith("d-4: already queued")  # the retried delivery
    assert jobs(store) == [(4, A, "queued")]
    assert [s["state"] for s in fake.state.statuses[A]] == ["pending"]
    assert fake.labels_on(4) == {"eval:pending"} and len(fake.comments_on(4)) == 1


def test_close_then_reopen_on_the_same_head_queues_it_again(
        quick: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, store = quick
    fake.add_pull(Pull(12, A, BASE, MAINTAINER))
    for action in ("opened", "closed", "reopened"):
        send.post("pull_request", payloads.pull_request(action, number=12, head_sha=A,
                                                        author=MAINTAINER), delivery=action)
        wait_for(lambda a=action: handled(running, a))  # type: ignore[misc]
    assert [(j.head_sha, j.attempt, j.state) for j in store.pr_jobs(REPO_NAME, 12)] == [
        (A, 1, "cancelled"), (A, 2, "queued")]
    assert fake.state.statuses[A][-1]["state"] == "pending"
    assert "queued" in fake.state.statuses[A][-1]["description"]
    [sticky] = fake.comments_on(12)
    assert "attempt 2" in sticky["body"]


# ---- 6. floods -------------------------------------------------------------------------------------
def test_thirty_helps_from_a_fork_author_get_one_reply_and_one_permission_look_up(
        quick: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, _store = quick
    fake.add_pull(Pull(3, A, BASE, OUTSIDER, fork=True))
    for i in range(30):
        send.post("issue_comment", payloads.pr_comment(number=3, body="/evalbot help",
                                                       author=OUTSIDER, pr_author=OUTSIDER,
                                                       comment_id=8000 + i))
    wait_for(lambda: len(running.dispatcher.done) == 30)
    assert len(fake.comments_on(3)) == 1  # a fork author's help: answered once
    assert sum(line.endswith(": help (already answered)") for line in running.dispatcher.done) \
        == 29
    assert fake.calls("repos/get-collaborator-permission-level") <= 2
    from evalbot.service.health import metrics_text
    fake.add_user("Octocat", "read")  # no write access, not the PR's author: refused once
    for i in range(5):
        send.post("issue_comment", payloads.pr_comment(number=3, body="/evalbot rerun",
                                                       author="Octocat", pr_author=OUTSIDER,
                                                       comment_id=8100 + i))
    wait_for(lambda: len(running.dispatcher.done) == 35)
    assert len(fake.comments_on(3)) == 2  # the help and one refusal
    text = metrics_text(_store.path)  # what GET /metrics serves: the drops are counted
    assert 'evalbot_surplus_commands_total{reason="help"} 29' in text.splitlines()
    assert 'evalbot_surplus_commands_total{reason="refusal"} 4' in text.splitlines()


# ---- 8. a service that says when it is broken ------------------------------------------------------
def test_a_dead_dispatcher_turns_deliveries_away_with_503(
        quick: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, store = quick
    running.dispatcher.dead = RuntimeError("killed by the test")  # what run() records on death
    got = send.post("pull_request", payloads.pull_request("opened", number=2, head_sha=A,
                                                          author=MAINTAINER))
    assert got.status_code == 503
    assert store.inbox_counts()["waiting"] == 0  # nothing stored that nobody would handle


def test_a_dispatcher_that_cannot_reach_github_at_start_keeps_trying(
        config: Config, port: GitHubPort, fake: FakeGitHub) -> None:
    from evalbot.github.dispatcher import Dispatcher
    from evalbot.github.service import make_handlers

    calls: list[int] = []

    def flaky(store: Store):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("GitHub unreachable")
        return make_handlers(config, store, port, fast_backoff())

    dispatcher = Dispatcher(flaky, config.store, threading.Event(), retry_s=0.05)
    thread = threading.Thread(target=dispatcher.run, daemon=True)
    thread.start()
    wait_for(lambda: len(calls) >= 3)
    assert dispatcher.alive() and thread.is_alive()
    dispatcher.stopping.set()
    dispatcher.wake.set()
    thread.join(timeout=30)
    assert dispatcher.alive()


def test_metrics_show_the_inbox_the_set_aside_and_the_unpublished(
        quick: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    from evalbot.service.health import metrics_text

    running, send, store = quick
    fake.add_pull(Pull(6, A, BASE, MAINTAINER))
    fake.inject(Fault("issues/list-comments", 502, times=10**6, where="/issues/6/"))
    send.post("issue_comment", payloads.pr_comment(number=6, body="/evalbot help",
                                                   author=MAINTAINER, comment_id=9101),
              delivery="d-m")
    store.inbox_put("poison", "pull_request", b"[" * 100000, "x#1")
    running.dispatcher.wake.set()
    wait_for(lambda: store.inbox_tries("d-m") >= 1 and store.inbox_counts()["aside"] == 1)
    text = metrics_text(store.path)
    assert "evalbot_inbox_depth 1" in text and "evalbot_inbox_retrying 1" in text
    assert "evalbot_inbox_set_aside 1" in text and "evalbot_unpublished 0" in text


# ---- reconcile: what was pushed while the service was down is evaluated -------------------------
def test_a_push_while_the_service_was_down_is_queued_at_start(
        config: Config, port: GitHubPort, fake: FakeGitHub) -> None:
    from tests.github.fixtures import own_port

    fake.add_pull(Pull(14, A, BASE, MAINTAINER))
    secret = secrets.token_bytes(32)
    running = start(config, secret, port, backoff=fast_backoff(), reconcile_s=3600.0,
                    reconcile_port=own_port(fake))
    store = Store(config.store)
    try:
        wait_for(lambda: bool(running.reconciler and running.reconciler.reconciled))
        assert jobs(store) == [(14, A, "queued")]
    finally:
        running.stop()
    fake.state.pulls[14].head_sha = C  # pushed while down: GitHub will not redeliver the event
    running = start(config, secret, port, backoff=fast_backoff(), reconcile_s=3600.0,
                    reconcile_port=own_port(fake))
    try:
        wait_for(lambda: bool(running.reconciler and running.reconciler.reconciled))
        assert jobs(store) == [(14, A, "superseded"), (14, C, "queued")]
        assert fake.state.statuses[C][-1]["state"] == "pending"
    finally:
        store.close()
        running.stop()


# ---- 7. smaller: a label created, then answered 502, is not a 422 that drops the delivery --------
def test_a_label_created_then_answered_502_still_ends_with_the_pending_status(
        quick: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, store = quick
    fake.add_pull(Pull(15, A, BASE, MAINTAINER))
    fake.inject(Fault("issues/create-label", 502, after_commit=True))
    send.post("pull_request", payloads.pull_request("opened", number=15, head_sha=A,
                                                    author=MAINTAINER), delivery="d-15")
    wait_for(lambda: handled(running, "d-15"))
    assert "queued job" in running.dispatcher.done[-1]
    assert fake.labels_on(15) == {"eval:pending"}
    assert fake.state.statuses[A][-1]["state"] == "pending"
