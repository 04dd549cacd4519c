"""A verdict's publication in an unkind world (issue 47), with `evalbot worker` as a real process:
GitHub refusing the token for a while, a person deleting the bot's comment while it is edited,
the worker killed (SIGKILL) or stopped (SIGTERM) at each step of publishing and started again.

The verdict is a real one (the stub engine measured by the real harness, graded) in the store the
worker uses; the PR on the fake GitHub (unmodified PyGithub, every request checked against
GitHub's OpenAPI description) shows the pending state its admission left. The assertions are on
the final state: the head's verdict published once, with its labels and status.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.settings import Config
from evalbot.store.jobs import Store
from tests.github.fake_github import FakeGitHub, Hook
from tests.publication_env import Measured, finished, measured, published, queued, service_config
from tests.service_env import Service, wait_for

pytest_plugins = ["tests.github.fixtures"]
PR = 7


@pytest.fixture(scope="module")
def m(tmp_path_factory: pytest.TempPathFactory) -> Measured:
    return measured(tmp_path_factory.mktemp("stub"))


@pytest.fixture
def worker(tmp_path: Path, fake: FakeGitHub, m: Measured) -> Iterator[Service]:
    """`evalbot worker` on a store holding PR 7's finished, unpublished verdict (not started)."""
    config = service_config(tmp_path, fake, m)
    queued(fake, PR, m.shas["faster"], m.main)
    finished(config, PR, m)
    svc = Service(config, fake.token, tmp_path, command="worker")  # type: ignore[attr-defined]
    yield svc
    svc.stop()


def done(config: Config) -> bool:
    """The store has the job published (and nothing given up)."""
    store = Store(config.store)
    try:
        [job] = store.jobs()
        return job.published is not None and store.given_up() == []
    finally:
        store.close()


def verdict_body(body: Any) -> bool:
    return isinstance(body, dict) and '"kind": "queued"' not in str(body.get("body"))


def test_a_verdict_that_met_a_401_is_published_once_the_token_works_again(
        worker: Service, fake: FakeGitHub, m: Measured) -> None:
    fake.revoke()  # an installation revoked, a key rotated: every request answers 401
    worker.start()
    wait_for("GitHub to refuse the token", lambda: any(s == 401 for *_, s in fake.log),
             proc=worker.proc, log=worker.log)
    assert not published(fake, PR, m.shas["faster"], m.verdict)
    fake.restore()
    wait_for("the verdict, once the token works again", lambda: published(
        fake, PR, m.shas["faster"], m.verdict) and done(worker.config),
        proc=worker.proc, log=worker.log)
    assert fake.calls("issues/create-comment") == 0  # the pending comment, edited in place


def test_a_comment_deleted_while_it_is_edited_is_made_again_with_the_verdict(
        worker: Service, fake: FakeGitHub, m: Measured) -> None:
    def person_deletes(_body: Any) -> None:  # between the bot's listing and its edit
        for cid in [c for c, v in fake.state.comments.items() if v["issue"] == PR]:
            del fake.state.comments[cid]

    fake.before(Hook("issues/update-comment", person_deletes, match=verdict_body))
    worker.start()
    wait_for("the verdict in a new comment", lambda: published(
        fake, PR, m.shas["faster"], m.verdict) and done(worker.config),
        proc=worker.proc, log=worker.log)
    assert fake.calls("issues/create-comment") == 1
    assert ("PATCH", "issues/update-comment", 404) in fake.log  # GitHub's answer, as GitHub


STEPS = {  # where publishing is interrupted: the request the worker never sees answered
    "before the comment": Hook("issues/update-comment", lambda _b: None, match=verdict_body),
    "between comment and labels": Hook("issues/list-labels-for-repo", lambda _b: None),
    "between labels and status": Hook("repos/create-commit-status", lambda _b: None,
                                      match=lambda b: b.get("state") != "pending"),
}


@pytest.mark.parametrize(("step", "sig"), [
    pytest.param(step, signal.SIGKILL, id=f"SIGKILL {step}") for step in STEPS] + [
    pytest.param("before the comment", signal.SIGTERM, id="SIGTERM while publishing")])
def test_a_restart_mid_publication_publishes_within_30_s(
        worker: Service, fake: FakeGitHub, m: Measured, step: str, sig: int) -> None:
    gone = threading.Event()

    def end_the_worker(_body: Any) -> int:
        worker.kill(sig)  # SIGTERM drains: with no job in flight the process ends at once
        gone.set()
        return 502  # the process is gone; nothing of this request is stored

    where = STEPS[step]
    fake.before(Hook(where.op_id, end_the_worker, match=where.match))
    worker.start()
    wait_for(f"the worker to end {step}", gone.is_set, timeout_s=90, log=worker.log)
    assert not published(fake, PR, m.shas["faster"], m.verdict)
    worker.start()
    # The dead process's claim on the PR is free at once: no lease to wait out.
    wait_for("the verdict, within 30 s of the restart", lambda: published(
        fake, PR, m.shas["faster"], m.verdict) and done(worker.config),
        timeout_s=30, proc=worker.proc, log=worker.log)
