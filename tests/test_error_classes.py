"""Errors by class (issue 47): every GitHub answer and store error that docs/service.md's "Errors by
class" names, walked through the dispatcher (one delivery: a push admitted) and through the
publisher (one finished verdict), each met as it really comes: the fake GitHub's answers over HTTP
to unmodified PyGithub, the store's own SQLite errors (a writer holding the lock, a tmpfs filled
to the last byte, the write-ahead log's file descriptors swapped for unwritable ones).

Each row: the fault, what the dispatcher does with the delivery (handled, consumed as failed,
deferred with a back-off, held: kept and the whole dispatcher waits, paused: kept and the
dispatcher waits GitHub's time), what the publisher does with the verdict (published, retried,
given up, held, rate-limited), and then, the fault gone, the final state.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.redact import Redactor
from evalbot.config.settings import Config
from evalbot.github.dispatcher import Dispatcher
from evalbot.github.hold import Hold
from evalbot.github.publish import Backoff
from evalbot.github.pygithub_client import PyGithubPort
from evalbot.github.service import make_handlers, make_publisher, publish_finished
from evalbot.service.publishing import publish_pending
from evalbot.store.jobs import Store
from tests.github import payloads
from tests.github.accounts import BOT, MAINTAINER
from tests.github.fake_github import REPO, FakeGitHub, Fault, Hook
from tests.graded_history import record
from tests.publication_env import Measured, fill, measured, published, queued, shown, small_disk
from tests.service_env import wait_for

pytest_plugins = ["tests.github.fixtures"]
PR, OLD = 6, "0" * 40  # the PR shows an older head's pending comment: there is one to edit
LOCKED = "Unable to create comment because issue is locked."
FIRST = {"dispatcher": "repos/get-collaborator-permission-level",  # its first GitHub request
         "publisher": "issues/list-comments"}


@dataclass
class World:
    fake: FakeGitHub
    store: Store
    disk: Path | None
    heal: list[Callable[[], None]] = field(default_factory=list)


Inject = Callable[[World, str], None]  # given the walk's first GitHub request


def answer(status: int, op: str | None = None, **kw: Any) -> Inject:
    def inject(w: World, first: str) -> None:
        w.fake.inject(Fault(op or first, status, **kw))
    return inject


def rate_reset(w: World, first: str) -> None:  # the primary limit: remaining 0 until its reset
    w.fake.inject(Fault(first, 403, message="API rate limit exceeded for installation",
                        headers={"x-ratelimit-remaining": "0",
                                 "x-ratelimit-reset": str(int(time.time()) + 2)}))


def revoke(w: World, _first: str) -> None:
    w.fake.revoke()
    w.heal.append(w.fake.restore)


def person_deletes(w: World, _first: str) -> None:
    def delete(_body: Any) -> None:
        for cid in [c for c, v in w.fake.state.comments.items() if v["issue"] == PR]:
            del w.fake.state.comments[cid]
    w.fake.before(Hook("issues/update-comment", delete))


def lock(w: World, _first: str) -> None:
    other = sqlite3.connect(w.store.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the store
    w.store.db.execute("PRAGMA busy_timeout = 100")
    w.heal.append(lambda: (other.execute("ROLLBACK"), other.close()))


def full(w: World, _first: str) -> None:
    assert w.disk is not None
    w.heal.append(fill(w.disk).unlink)


def broken_io(w: World, _first: str) -> None:
    """Every descriptor of this process on the store's write-ahead log now refuses reads and
    writes (a directory opened read-only): SQLite meets EISDIR/EBADF, as on a failing disk."""
    wal = os.path.realpath(f"{w.store.path}-wal")
    fds = [int(fd) for fd in os.listdir("/proc/self/fd")
           if _link(f"/proc/self/fd/{fd}") == wal]
    assert fds, "the store has no write-ahead log open"
    saved = {fd: os.dup(fd) for fd in fds}
    bad = os.open("/", os.O_RDONLY)
    for fd in fds:
        os.dup2(bad, fd)
    os.close(bad)

    def restore() -> None:
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
    w.heal.append(restore)


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


@dataclass(frozen=True)
class Row:
    name: str  # as docs/service.md's table names it
    inject: Inject
    dispatcher: str
    publisher: str
    timeout_s: int = 15  # the port's HTTP timeout
    disk: bool = False  # the store on a small tmpfs


ROWS = [
    Row("401", revoke, "held", "held"),
    Row("403 rate limit", rate_reset, "paused", "rate-limited"),
    Row("403", answer(403, "issues/update-comment", message=LOCKED), "consumed", "given up"),
    Row("404 on the comment", person_deletes, "handled", "published"),
    Row("404 on the PR", answer(404, "issues/list-comments", message="Not Found"),
        "consumed", "given up"),
    Row("409", answer(409, "repos/create-commit-status", message="Conflict"),
        "consumed", "given up"),
    Row("422", answer(422, "issues/add-labels", message="Validation Failed"),
        "consumed", "given up"),
    Row("429", answer(429, headers={"Retry-After": "1"}, message="too many requests"),
        "paused", "rate-limited"),
    Row("5xx", answer(502), "deferred", "retried"),
    Row("time-out", answer(0, after_commit=True, delay_s=3.0), "deferred", "retried",
        timeout_s=1),
    Row("store locked", lock, "held", "held"),
    Row("store full", full, "held", "held", disk=True),
    Row("store I/O", broken_io, "held", "held"),
]


@pytest.fixture(scope="module")
def m(tmp_path_factory: pytest.TempPathFactory) -> Measured:
    return measured(tmp_path_factory.mktemp("stub"))


@contextmanager
def world(row: Row, fake: FakeGitHub, tmp_path: Path) -> Iterator[World]:
    with ExitStack() as stack:
        disk = stack.enter_context(small_disk()) if row.disk else None
        store = Store((disk or tmp_path) / "walk.sqlite3")
        stack.callback(store.close)
        yield World(fake, store, disk)


def walk_ports(row: Row, fake: FakeGitHub) -> tuple[PyGithubPort, Backoff]:
    """No retry inside a call: each class reaches the dispatcher or the sweep as it came."""
    return (PyGithubPort(REPO, fake.token, fake.api_url, throttle=False,  # type: ignore[attr-defined]
                         timeout_s=row.timeout_s),
            Backoff(tries=1, max_wait_s=0.5, transient_wait_s=0.05))


# ---- the dispatcher ------------------------------------------------------------------------------
def dispatched(d: Dispatcher, store: Store, paused: list[float]) -> str:
    line = next((x for x in d.done if x.startswith("d-1: ")), "")
    if line:
        return "set aside" if ": set aside: " in line else \
            "consumed" if ": failed: " in line else "handled"
    return "paused" if paused else "held" if not d.hold.open() else \
        "deferred" if store.inbox_tries("d-1") else "untouched"


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_the_dispatcher_handles_each_error_by_its_class(
        row: Row, config: Config, fake: FakeGitHub, tmp_path: Path, m: Measured) -> None:
    head = m.shas["faster"]
    queued(fake, PR, OLD, m.main)  # an older head's comment to edit, and no label yet
    fake.state.pulls[PR].head_sha, fake.state.issue_labels[PR] = head, []
    port, backoff = walk_ports(row, fake)
    paused: list[float] = []
    with world(row, fake, tmp_path) as w:
        handlers = make_handlers(config, w.store, port, backoff)
        d = Dispatcher(lambda _s: handlers, w.store.path, threading.Event(), retry_s=0.05,
                       pause=paused.append)
        body = payloads.pull_request("opened", number=PR, head_sha=head, base_sha=m.main,
                                     author=MAINTAINER)
        assert w.store.inbox_put("d-1", "pull_request", json.dumps(body).encode(), f"{REPO}#{PR}")
        row.inject(w, FIRST["dispatcher"])
        d.turn(w.store, handlers)
        for heal in w.heal:  # the token works again, the lock is let go, the disk freed
            heal()
        assert dispatched(d, w.store, paused) == row.dispatcher
        line = wait_for("the delivery handled", lambda: (d.turn(w.store, handlers), next(
            (x for x in d.done if x.startswith("d-1: ")), ""))[1])
        assert w.store.inbox_counts() == {"waiting": 0, "retrying": 0, "aside": 0}
        if row.dispatcher == "consumed":  # logged with GitHub's answer, the PR left as it was
            assert re.search(rf"failed: GitHub refused \({row.name[:3]}\)", line), line
            return
        assert re.match(r"d-1: (queued job|already queued)", line), line
        assert [(j.head_sha, j.state) for j in w.store.jobs()] == [(head, "queued")]
    bot = [str(c["body"]) for c in fake.comments_on(PR) if c["author"] == BOT]
    assert shown(bot) == [(head, "queued")]
    assert fake.labels_on(PR) == {"eval:pending"}
    assert fake.state.statuses[head][-1]["state"] == "pending"


# ---- the publisher -------------------------------------------------------------------------------
def swept(lines: list[str]) -> str:
    text = " ".join(lines)
    for words, outcome in (("store ", "held"), ("credentials refused", "held"),
                           ("rate-limited", "rate-limited"), ("retry in", "retried"),
                           ("given up", "given up"), ("published", "published")):
        if words in text:
            return outcome
    return f"nothing ({text})"


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_the_publisher_handles_each_error_by_its_class(
        row: Row, config: Config, fake: FakeGitHub, tmp_path: Path, m: Measured) -> None:
    head = m.shas["faster"]
    queued(fake, PR, head, m.main)
    port, backoff = walk_ports(row, fake)
    publisher = make_publisher(config, port, backoff)

    def publish(store: Store, job_id: str) -> None:
        publish_finished(store, publisher, job_id, Redactor())

    hold = Hold(0.05, 1.0)
    with world(row, fake, tmp_path) as w:
        job = record(w.store, REPO, PR, m.main, head, m.results, m.verdict)
        row.inject(w, FIRST["publisher"])
        lines = publish_pending(w.store, publish, "w1", first_retry_s=0.05, hold=hold)
        for heal in w.heal:
            heal()
        assert swept(lines) == row.publisher, lines
        if row.publisher == "given up":  # for good, with GitHub's answer as the reason
            [(given, pr, reason)] = w.store.given_up()
            assert (given, pr) == (job, PR) and f"({row.name[:3]})" in reason
            assert not published(fake, PR, head, m.verdict)
            return
        wait_for("the verdict published", lambda: publish_pending(
            w.store, publish, "w1", first_retry_s=0.05, hold=hold) == [f"{job}: published"]
            or w.store.get(job).published is not None)
        assert w.store.given_up() == [] and w.store.get(job).published is not None
    assert published(fake, PR, head, m.verdict)


def test_docs_name_every_class_and_its_handling() -> None:
    """docs/service.md's table has one row per class walked here, and no other."""
    text = (Path(__file__).parents[1] / "docs" / "service.md").read_text()
    section = text.split("## Errors by class", 1)[1].split("\n## ", 1)[0]
    named = [line.split("|")[1].strip().strip("`") for line in section.splitlines()
             if line.startswith("| ") and not line.startswith("| answer")]
    assert named == [r.name for r in ROWS]
