"""Signed deliveries through the running server and dispatcher to jobs and the fake GitHub."""

from __future__ import annotations

from evalbot.github.service import Running
from evalbot.store.jobs import Store
from tests.github import payloads
from tests.github.accounts import MAINTAINER, OUTSIDER
from tests.github.fake_github import FakeGitHub, Pull
from tests.github.sender import Sender, settle

A, B, C = "a" * 40, "b1" * 20, "c" * 40

pytest_plugins = ["tests.github.fixtures"]




def jobs(store: Store) -> list[tuple[int | None, str, str, int]]:
    return [(j.pr, j.head_sha, j.state, j.attempt) for j in store.jobs()]


def _opened_then_pushed(bot: tuple[Running, Sender, Store], fake: FakeGitHub,
                        before_push: object = None) -> None:
    """PR 2 opened at A and handled; then pushed to C (GitHub's head first: the push, as GitHub
    has it) and that delivery handled. `before_push`: a fault to inject in between."""
    running, send, _store = bot
    fake.add_pull(Pull(2, A, "b" * 40, MAINTAINER))
    send.post("pull_request", payloads.pull_request("opened", number=2, head_sha=A,
                                                    author=MAINTAINER))
    settle(running, 1)
    fake.state.pulls[2].head_sha = C
    if before_push is not None:
        fake.inject(before_push)  # type: ignore[arg-type]
    send.post("pull_request", payloads.pull_request("synchronize", number=2, head_sha=C,
                                                    author=MAINTAINER), delivery="d-push")
    settle(running, 2)


def test_second_push_supersedes_and_comment_follows_newer_head(
        bot: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, store = bot
    _opened_then_pushed(bot, fake)
    assert jobs(store) == [(2, A, "superseded", 1), (2, C, "queued", 1)]
    [comment] = fake.comments_on(2)
    assert C[:10] in comment["body"] and A[:10] not in comment["body"]
    # The superseded head says so (issue 47: it stayed "pending" for ever), once.
    assert [s["state"] for s in fake.state.statuses[A]] == ["pending", "error"]
    assert fake.state.statuses[A][-1]["description"] == (
        f"superseded by {C[:10]}: not evaluated, a newer push replaced it")
    assert [s["state"] for s in fake.state.statuses[C]] == ["pending"]
    send.post("pull_request", payloads.pull_request("synchronize", number=2, head_sha=C,
                                                    author=MAINTAINER))  # a repeated event
    settle(running, 3)
    assert len(fake.state.statuses[A]) == 2 and len(fake.state.statuses[C]) == 1


def test_a_superseded_status_that_met_502s_is_written_by_the_retried_delivery(
        bot: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    from tests.github.fake_github import Fault

    running, _send, store = bot
    _opened_then_pushed(bot, fake, Fault("repos/create-commit-status", 502, times=5,
                                         where=f"/statuses/{A}"))
    assert running.dispatcher.done[-1].startswith("d-push: already queued")  # retried, then ok
    assert fake.state.statuses[A][-1]["state"] == "error"
    assert [s["state"] for s in fake.state.statuses[C]] == ["pending"]
    assert jobs(store) == [(2, A, "superseded", 1), (2, C, "queued", 1)]


def test_fork_pr_by_outsider_waits_for_the_approval_label(
        bot: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, store = bot
    send.post("pull_request", payloads.pull_request("opened", number=3, head_sha=A,
                                                    author=OUTSIDER, fork=True))
    settle(running, 1)
    # The outsider labels their own PR: they lack write access, so it is no approval, and the
    # label comes off again with one reply.
    fake.add_pull(Pull(3, A, "b" * 40, OUTSIDER, fork=True), ["evalbot-approved"])
    send.post("pull_request", payloads.pull_request(
        "labeled", number=3, head_sha=A, author=OUTSIDER, sender=OUTSIDER, fork=True,
        labels=("evalbot-approved",), label="evalbot-approved"))
    settle(running, 2)
    assert jobs(store) == [] and fake.labels_on(3) == set()
    [refusal] = fake.comments_on(3)
    assert "label approves an evaluation only when someone with write access" in refusal["body"]
    fake.state.issue_labels[3] = ["evalbot-approved"]  # the maintainer applies it
    assert fake.state.statuses[A][-1]["description"].startswith("waiting for a maintainer")
    send.post("pull_request", payloads.pull_request(
        "labeled", number=3, head_sha=A, author=OUTSIDER, sender=MAINTAINER, fork=True,
        labels=("evalbot-approved",), label="evalbot-approved"))
    settle(running, 3)
    assert jobs(store) == [(3, A, "queued", 1)]
    assert len(fake.comments_on(3)) == 2
    assert fake.labels_on(3) == {"eval:pending", "evalbot-approved"}


def test_drafts_wait_and_closed_cancels(bot: tuple[Running, Sender, Store],
                                        fake: FakeGitHub) -> None:
    running, send, store = bot
    send.post("pull_request", payloads.pull_request("opened", number=4, head_sha=A,
                                                    author=MAINTAINER, draft=True))
    send.post("pull_request", payloads.pull_request("ready_for_review", number=4, head_sha=A,
                                                    author=MAINTAINER))
    send.post("pull_request", payloads.pull_request("closed", number=4, head_sha=A,
                                                    author=MAINTAINER))
    lines = settle(running, 3)
    assert lines[0].endswith("waiting: draft")
    assert jobs(store) == [(4, A, "cancelled", 1)]


def test_quota_per_pr_per_day(bot: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, store = bot
    fake.add_pull(Pull(5, A, "b" * 40, MAINTAINER))
    for i, sha in enumerate((A, B, C)):  # config: 2 evaluations per PR per day
        fake.state.pulls[5].head_sha = sha  # the push, as GitHub has it
        send.post("pull_request", payloads.pull_request("synchronize", number=5, head_sha=sha,
                                                        author=MAINTAINER))
        settle(running, i + 1)
    assert [j[1] for j in jobs(store)] == [A, B]
    assert "PR quota reached" in fake.state.statuses[C][-1]["description"]


def test_commands_permissions_and_refusals(bot: tuple[Running, Sender, Store],
                                           fake: FakeGitHub) -> None:
    running, send, store = bot
    fake.add_pull(Pull(6, A, "b" * 40, MAINTAINER))
    fake.add_user("Octocat", "read")  # a private org member shows up as CONTRIBUTOR: not enough
    for i, (who, text) in enumerate([("Octocat", "/evalbot rerun"),
                                     ("Octocat", "/evalbot cancel"),  # refused once per hour
                                     (MAINTAINER, "> /evalbot rerun\nquoting, not asking"),
                                     (MAINTAINER, "/evalbot rerun"),
                                     (MAINTAINER, "/evalbot rerunn"),
                                     (MAINTAINER, "/evalbot help")]):
        send.post("issue_comment", payloads.pr_comment(number=6, body=text, author=who,
                                                       pr_author=MAINTAINER, comment_id=900 + i))
        settle(running, i + 1)
    bodies = [c["body"] for c in fake.comments_on(6)]
    assert len(bodies) == 4, bodies  # refusal, sticky pending, parse error, help
    assert bodies[0].startswith("@\u200bOctocat sorry, evalbot takes commands only from people "
                                "with write access to this repository and the PR's author.")
    assert bodies[1].startswith("<!-- evalbot:v1 ") and A[:10] in bodies[1]
    assert "Did you mean `/evalbot rerun`?" in bodies[2]
    assert bodies[3].startswith("### evalbot commands")
    assert jobs(store) == [(6, A, "queued", 1)]


def test_commands_hidden_from_the_rendered_comment_do_nothing(
        bot: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    """An HTML comment, an indented code block, a lazy quote line: GitHub shows no command, so
    none runs; the plain one after them does (the pipeline works)."""
    running, send, store = bot
    fake.add_pull(Pull(16, A, "b" * 40, MAINTAINER))
    hidden = ["<!--\n/evalbot rerun\n-->", "Try this:\n\n    /evalbot rerun\n",
              "> can someone run\n/evalbot rerun", "<!-- /evalbot help -->"]
    for i, text in enumerate(hidden + ["/evalbot rerun"]):
        send.post("issue_comment", payloads.pr_comment(number=16, body=text, author=MAINTAINER,
                                                       pr_author=MAINTAINER,
                                                       comment_id=1600 + i))
        settle(running, i + 1)
        if i == len(hidden) - 1:
            assert jobs(store) == [] and fake.comments_on(16) == []
    assert jobs(store) == [(16, A, "queued", 1)]
    [sticky] = fake.comments_on(16)
    assert sticky["body"].startswith("<!-- evalbot:v1 ")


def test_rerun_of_evaluated_head_is_a_new_attempt_for_maintainers_only(
        bot: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, store = bot
    fake.add_pull(Pull(7, A, "b" * 40, OUTSIDER, fork=True), ["evalbot-approved"])
    job = store.enqueue(fake_repo(), 7, A, _policy(running), attempt=1)
    store.db.execute("UPDATE jobs SET state='done' WHERE id=?", (job.id,))
    send.post("issue_comment", payloads.pr_comment(number=7, body="/evalbot rerun",
                                                   author=OUTSIDER, pr_author=OUTSIDER))
    settle(running, 1)
    assert "reruns of an unchanged head are for maintainers" in fake.comments_on(7)[0]["body"]
    send.post("issue_comment", payloads.pr_comment(number=7, body="/evalbot rerun",
                                                   author=MAINTAINER, pr_author=OUTSIDER,
                                                   comment_id=5002))
    settle(running, 2)
    assert jobs(store) == [(7, A, "done", 1), (7, A, "queued", 2)]
    send.post("issue_comment", payloads.pr_comment(number=7, body="/evalbot cancel",
                                                   author=OUTSIDER, pr_author=OUTSIDER,
                                                   comment_id=5003))
    settle(running, 3)
    assert jobs(store)[-1] == (7, A, "cancelled", 2)
    assert fake.state.statuses[A][-1]["state"] == "error"
    assert fake.labels_on(7) == {"evalbot-approved"}


def fake_repo() -> str:
    from tests.github.fake_github import REPO

    return REPO


def _policy(running: Running) -> str:
    from evalbot.config.settings import REPO_ROOT
    from evalbot.grading.policy import load_labels

    return load_labels(REPO_ROOT / "labels.yaml").policy("default").ident
