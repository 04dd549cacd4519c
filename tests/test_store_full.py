"""The store's disk fills while `evalbot serve` runs (issue 47): during the start-up reconcile,
and under a delivery the webhook had already accepted. The store lives on a small tmpfs that a
hook of the fake GitHub fills to the last byte at the chosen moment (CI runs as root, so `mount`
is permitted); SQLite answers "database or disk is full" as it would on a full disk.

A full disk is the store's condition, not a PR's: the service must neither die (a supervisor's
restart would reconcile into the same full disk) nor set the delivery aside for good. Once the
disk is freed, the PR is admitted, measured and its verdict published, once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.settings import Config
from evalbot.store.jobs import Store
from tests.github import payloads
from tests.github.accounts import MAINTAINER
from tests.github.fake_github import FakeGitHub, Hook, Pull
from tests.publication_env import Measured, fill, measured, published, service_config, small_disk
from tests.service_env import Service, wait_for

pytest_plugins = ["tests.github.fixtures"]
PR = 5
FULL = "database or disk is full"


@pytest.fixture(scope="module")
def m(tmp_path_factory: pytest.TempPathFactory) -> Measured:
    return measured(tmp_path_factory.mktemp("stub"))


@pytest.fixture(name="small_disk")
def small_disk_fixture() -> Iterator[Path]:
    with small_disk() as disk:
        yield disk


@pytest.fixture
def serve(tmp_path: Path, fake: FakeGitHub, m: Measured, small_disk: Path) -> Iterator[Service]:
    """`evalbot serve` with its store on the small disk (its logs and results elsewhere)."""
    config = service_config(tmp_path, fake, m, store=small_disk / "evalbot.sqlite3")
    svc = Service(config, fake.token, tmp_path,  # type: ignore[attr-defined]
                  args=("--out", str(tmp_path / "results")))
    yield svc
    svc.stop()


def filled_by(fake: FakeGitHub, op_id: str, disk: Path) -> list[Path]:
    """The disk is filled when the bot makes this request; the filler's path lands in the list."""
    fillers: list[Path] = []

    def fill_it(_body: Any) -> None:
        fillers.append(fill(disk))

    fake.before(Hook(op_id, fill_it))
    return fillers


def outcome(config: Config) -> tuple[list[tuple[str, str, bool]], list[Any]]:
    """(head, state, published) of every job, and every delivery set aside."""
    store = Store(config.store)
    try:
        return ([(j.head_sha, j.state, j.published is not None) for j in store.jobs()],
                store.inbox_aside())
    finally:
        store.close()


def verdict_of(config: Config, head: str) -> dict[str, Any] | None:
    store = Store(config.store)
    try:
        found = store.history(pr=PR, sha=head)
        return found[0]["verdict"] if found else None
    finally:
        store.close()


def test_a_disk_filled_during_the_start_up_reconcile_holds_the_dispatcher_until_freed(
        serve: Service, fake: FakeGitHub, m: Measured, small_disk: Path) -> None:
    head = m.shas["faster"]
    fake.add_pull(Pull(PR, head, m.main, MAINTAINER))  # opened while the service was down
    fillers = filled_by(fake, "pulls/list", small_disk)  # the reconcile's first request
    serve.start()
    wait_for("the store to refuse the reconcile's write", lambda: FULL in serve.log.read_text(),
             proc=serve.proc, log=serve.log)
    fillers[0].unlink()  # the operator frees the disk
    verdict = wait_for("the verdict", lambda: verdict_of(serve.config, head), timeout_s=120,
                       proc=serve.proc, log=serve.log)
    wait_for("it on the PR", lambda: published(fake, PR, head, verdict)
             and outcome(serve.config)[0] == [(head, "done", True)],
             proc=serve.proc, log=serve.log)
    assert outcome(serve.config) == ([(head, "done", True)], [])


def test_an_accepted_delivery_that_meets_a_full_disk_is_handled_once_it_is_freed(
        serve: Service, fake: FakeGitHub, m: Measured, small_disk: Path) -> None:
    head = m.shas["faster"]
    send = serve.start()
    wait_for("the start-up reconcile", lambda: fake.calls("pulls/list") >= 1, proc=serve.proc,
             log=serve.log)
    fake.add_pull(Pull(PR, head, m.main, MAINTAINER))
    fillers = filled_by(fake, "repos/get-collaborator-permission-level", small_disk)
    got = send.post("pull_request", payloads.pull_request(
        "opened", number=PR, head_sha=head, base_sha=m.main, author=MAINTAINER),
        delivery="d-open")
    assert got.status_code == 202, got.text  # stored before the disk filled
    wait_for("the store to refuse the admission", lambda: FULL in serve.log.read_text(),
             proc=serve.proc, log=serve.log)
    fillers[0].unlink()
    verdict = wait_for("the verdict", lambda: verdict_of(serve.config, head), timeout_s=120,
                       proc=serve.proc, log=serve.log)
    wait_for("it on the PR", lambda: published(fake, PR, head, verdict)
             and outcome(serve.config)[0] == [(head, "done", True)],
             proc=serve.proc, log=serve.log)
    assert outcome(serve.config) == ([(head, "done", True)], [])  # nothing set aside
