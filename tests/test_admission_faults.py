"""Admissions and commands in an unkind world (issue 47): GitHub refusing the token (401) in the
middle of a delivery, and a force-push arriving while the old head's verdict is being published.

Signed deliveries over real HTTP to the running service (the webhook server and dispatcher in
this process for the 401 cases; `evalbot serve` as a process, its worker measuring the new head,
for the force-push), unmodified PyGithub against the fake GitHub (every request checked against
GitHub's OpenAPI description), state in a real SQLite file. The assertions are on final state,
and, for the force-push, on what the PR showed after every write (`fake.timeline`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.redact import Redactor
from evalbot.config.settings import Config
from evalbot.github.port import GitHubPort
from evalbot.github.service import Running, make_publisher, publish_finished
from evalbot.service.publishing import publish_pending
from evalbot.store.jobs import Store
from tests.github import payloads
from tests.github.accounts import BOT, MAINTAINER, OUTSIDER, fast_backoff
from tests.github.fake_github import FakeGitHub, Hook, Pull
from tests.github.sender import Sender, jobs
from tests.publication_env import Measured, finished, measured, published, queued, service_config, shown
from tests.service_env import Service
from tests.service_env import wait_for as wait_on

pytest_plugins = ["tests.github.fixtures"]
A, BASE = "a" * 40, "b" * 40
wait_for = functools.partial(wait_on, "the dispatcher's state", timeout_s=90.0)


def handled(running: Running, delivery: str) -> str:
    return next((line for line in running.dispatcher.done if line.startswith(f"{delivery}: ")),
                "")


def refused(fake: FakeGitHub) -> bool:
    return any(status == 401 for *_, status in fake.log)


# ---- 401: the token's condition, never the delivery's ----------------------------------------
def test_a_maintainers_command_that_met_a_401_runs_once_the_token_works_again(
        quick: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, store = quick
    fake.add_pull(Pull(6, A, BASE, MAINTAINER))
    send.post("pull_request", payloads.pull_request("opened", number=6, head_sha=A,
                                                    author=MAINTAINER), delivery="d-open")
    wait_for(lambda: handled(running, "d-open"))
    fake.revoke()  # a token revoked, a key rotated, a skewed clock: every request answers 401
    send.post("issue_comment", payloads.pr_comment(number=6, body="/evalbot cancel",
                                                   author=MAINTAINER, comment_id=9301),
              delivery="d-cancel")
    wait_for(lambda: refused(fake))
    assert jobs(store) == [(6, A, "queued")]
    fake.restore()
    line = wait_for(lambda: handled(running, "d-cancel"))
    assert line == "d-cancel: cancelled 1 job(s)"  # the command ran, it was not consumed
    assert jobs(store) == [(6, A, "cancelled")]
    assert shown([str(c["body"]) for c in fake.comments_on(6)]) == [(A, "cancelled")]
    assert fake.state.statuses[A][-1]["state"] == "error"
    assert store.inbox_counts() == {"waiting": 0, "retrying": 0, "aside": 0}


def test_an_admission_cut_short_by_a_401_gets_its_label_and_status_once_the_token_works(
        quick: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, store = quick
    fake.add_pull(Pull(4, A, BASE, MAINTAINER))

    def revoke(_body: Any) -> None:  # after the pending comment, before its label and status
        fake.revoke()

    fake.before(Hook("issues/list-labels-for-repo", revoke))
    send.post("pull_request", payloads.pull_request("opened", number=4, head_sha=A,
                                                    author=MAINTAINER), delivery="d-4")
    wait_for(lambda: refused(fake))
    assert shown([str(c["body"]) for c in fake.comments_on(4)]) == [(A, "queued")]
    assert fake.labels_on(4) == set() and A not in fake.state.statuses
    fake.restore()
    wait_for(lambda: fake.labels_on(4) == {"eval:pending"} and A in fake.state.statuses)
    assert [s["state"] for s in fake.state.statuses[A]] == ["pending"]
    assert shown([str(c["body"]) for c in fake.comments_on(4)]) == [(A, "queued")]
    assert jobs(store) == [(4, A, "queued")]
    # the same delivery, again; its line is recorded once its handling returns (after the writes)
    assert wait_for(lambda: handled(running, "d-4")).startswith("d-4: already queued")
    assert store.inbox_counts() == {"waiting": 0, "retrying": 0, "aside": 0}


# ---- a force-push while the old head's verdict is published ------------------------------------
PR = 8
STEPS = {  # the old verdict's write the push arrives before
    "the comment": Hook("issues/update-comment", lambda _b: None,
                        match=lambda b: '"kind": "queued"' not in str(b)),
    "the labels": Hook("issues/remove-label", lambda _b: None, where="/labels/eval"),
    "the status": Hook("repos/create-commit-status", lambda _b: None,  # the old head's verdict
                       match=lambda b: b.get("state") != "pending"),
}


@pytest.fixture(scope="module")
def m(tmp_path_factory: pytest.TempPathFactory) -> Measured:
    return measured(tmp_path_factory.mktemp("stub"))


@pytest.fixture
def serve(tmp_path: Path, fake: FakeGitHub, m: Measured) -> Iterator[Service]:
    """`evalbot serve` on a store holding the faster head's finished, unpublished verdict, the
    PR showing that head's pending state (not started)."""
    config = service_config(tmp_path, fake, m)
    queued(fake, PR, m.shas["faster"], m.main)
    finished(config, PR, m)
    svc = Service(config, fake.token, tmp_path)  # type: ignore[attr-defined]
    yield svc
    svc.stop()


def dealt_with(config: Config, delivery: str) -> bool:
    """The dispatcher handled the stored delivery, or tried it and put it back."""
    store = Store(config.store)
    try:
        row = store.db.execute("SELECT tries FROM inbox WHERE delivery=?", (delivery,)).fetchone()
        return row is None or row["tries"] > 0
    finally:
        store.close()


def verdict_of(config: Config, head: str) -> dict[str, Any] | None:
    """The head's verdict, once the store has it published."""
    store = Store(config.store)
    try:
        job = next((j for j in store.jobs() if j.head_sha == head and j.published), None)
        return None if job is None else next(
            h["verdict"] for h in store.history(pr=PR, sha=head) if h["job_id"] == job.id)
    finally:
        store.close()


@pytest.mark.parametrize("step", list(STEPS))
def test_a_force_push_during_publication_never_shows_the_old_verdict(
        serve: Service, fake: FakeGitHub, m: Measured, step: str) -> None:
    old, new = m.shas["faster"], m.shas["neutral"]
    ready, senders = threading.Event(), []

    def push(_body: Any) -> None:  # the PR's head moves while the old verdict is written
        assert ready.wait(60)
        fake.state.pulls[PR].head_sha = new
        got = senders[0].post("pull_request", payloads.pull_request(
            "synchronize", number=PR, head_sha=new, base_sha=m.main, author=MAINTAINER),
            delivery="d-push")
        assert got.status_code == 202, got.text
        wait_on("the dispatcher to take the push", lambda: dealt_with(serve.config, "d-push"),
                timeout_s=60)

    where = STEPS[step]
    fake.before(Hook(where.op_id, push, where=where.where, match=where.match))
    senders.append(serve.start())
    ready.set()
    verdict = wait_on("the new head's verdict", lambda: verdict_of(serve.config, new),
                      timeout_s=120, proc=serve.proc, log=serve.log)
    wait_on("it on the PR", lambda: published(fake, PR, new, verdict), proc=serve.proc,
            log=serve.log)
    views = [v[PR] for _what, v in fake.timeline]
    since = next(i for i, (bodies, _) in enumerate(views) if (new, "queued") in shown(bodies))
    later = views[since:]  # from the new head's pending comment on, the old head never shows
    assert all(old not in [head for head, _ in shown(bodies)] for bodies, _ in later)
    labelled = next(i for i, (_, labels) in enumerate(later) if "eval:pending" in labels)
    until = next(i for i, (bodies, _) in enumerate(later) if (new, verdict["kind"]) in
                 shown(bodies))
    assert labelled < until  # and eval:pending, once on, stays until the new head's verdict
    assert all("eval:pending" in labels for _, labels in later[labelled:until])


def test_a_comment_flood_does_not_keep_the_verdict_from_its_pr(
        quick: tuple[Running, Sender, Store], fake: FakeGitHub, config: Config,
        port: GitHubPort, m: Measured) -> None:
    """A hostile commenter cannot starve the verdict by keeping the dispatcher on its PR: each
    delivery holds the PR's claim only while it is handled."""
    running, send, store = quick
    head = m.shas["faster"]
    queued(fake, PR, head, m.main)
    job = finished(config, PR, m)
    publisher = make_publisher(config, port, fast_backoff())

    def publish(s: Store, job_id: str) -> None:
        publish_finished(s, publisher, job_id, Redactor())

    for i in range(60):
        send.post("issue_comment", payloads.pr_comment(number=PR, body="/evalbot help",
                                                       author=OUTSIDER, comment_id=9400 + i))
    def swept() -> bool:  # a worker's sweeps, while the flood is handled
        publish_pending(store, publish, "worker")
        return store.get(job).published is not None

    wait_for(swept)
    wait_for(lambda: len(running.dispatcher.done) == 60)
    bots = [str(c["body"]) for c in fake.comments_on(PR) if c["author"] == BOT]
    assert shown(bots) == [(head, m.verdict["kind"])] and len(bots) == 2  # and one help reply
    assert fake.labels_on(PR) == set(m.verdict["labels"])
    assert fake.state.statuses[head][-1]["state"] == "success"
