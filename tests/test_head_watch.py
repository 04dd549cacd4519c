"""The worker's read of its job's PR at each renewal (evalbot.service.head_watch), against the
fake GitHub through unmodified PyGithub: a new head is handled as `intake` would handle its push
(a writer's push supersedes; a fork's unapproved push does not), a closed PR cancels, and GitHub
failing or rate-limiting the read leaves the evaluation running. The workflow's run of it, with
the runner busy, is tests/test_workflow_push.py."""

from __future__ import annotations

import time

from evalbot.config.settings import Config
from evalbot.github.port import GitHubPort
from evalbot.github.service import make_handlers
from evalbot.service.head_watch import HeadWatch
from evalbot.store.jobs import JobRow, Store
from tests.github.accounts import MAINTAINER, OUTSIDER, fast_backoff
from tests.github.fake_github import REPO, FakeGitHub, Fault, Pull

pytest_plugins = ["tests.github.fixtures"]
OLD, NEW, BASE = "1" * 40, "2" * 40, "b" * 40


def _running(config: Config, fake: FakeGitHub, author: str = MAINTAINER,
             fork: bool = False) -> tuple[Store, JobRow]:
    fake.add_pull(Pull(7, OLD, BASE, author, fork=fork))
    store = Store(config.store)
    store.enqueue(REPO, 7, OLD, "default@1", base_sha=BASE)
    job = store.lease("w1", 60.0, box="local")
    assert job is not None
    return store, job


def _watch(config: Config, port: GitHubPort, clock: list[float] | None = None) -> HeadWatch:
    now = clock or [0.0]
    return HeadWatch(REPO, lambda: port, lambda store, given: make_handlers(
        config, store, given, fast_backoff()), clock=lambda: now[0])


def _states(store: Store) -> list[tuple[str, str]]:
    return [(j.head_sha, j.state) for j in store.pr_jobs(REPO, 7)]


def test_an_unmoved_head_costs_one_read_and_changes_nothing(
        config: Config, fake: FakeGitHub, port: GitHubPort) -> None:
    store, job = _running(config, fake)
    assert _watch(config, port)(store, job) is None
    assert _states(store) == [(OLD, "running")] and fake.calls("pulls/get") == 1
    assert store.renew(job.id, "w1", 60.0)


def test_a_writers_push_supersedes_the_running_job_and_queues_the_new_head(
        config: Config, fake: FakeGitHub, port: GitHubPort) -> None:
    store, job = _running(config, fake)
    fake.state.pulls[7].head_sha = NEW
    said = _watch(config, port)(store, job)
    assert said is not None and said.startswith("queued job"), said
    assert _states(store) == [(OLD, "superseded"), (NEW, "queued")]
    assert not store.renew(job.id, "w1", 60.0)  # the renewal that follows stops the run
    assert fake.state.statuses[OLD][-1]["state"] == "error"
    assert fake.labels_on(7) == {"eval:pending"}


def test_an_unapproved_fork_push_supersedes_nothing_as_intake_would_not(
        config: Config, fake: FakeGitHub, port: GitHubPort) -> None:
    store, job = _running(config, fake, author=OUTSIDER, fork=True)
    fake.state.pulls[7].head_sha = NEW
    said = _watch(config, port)(store, job)
    assert said is not None and said.startswith("waiting"), said
    assert _states(store) == [(OLD, "running")]
    assert store.renew(job.id, "w1", 60.0)


def test_a_closed_pr_cancels_its_job(
        config: Config, fake: FakeGitHub, port: GitHubPort) -> None:
    store, job = _running(config, fake)
    fake.state.pulls[7].state = "closed"
    assert _watch(config, port)(store, job) == "cancelled 1 job(s)"
    assert _states(store) == [(OLD, "cancelled")]


def test_github_failing_the_read_leaves_the_run_going(
        config: Config, fake: FakeGitHub, port: GitHubPort) -> None:
    store, job = _running(config, fake)
    fake.state.pulls[7].head_sha = NEW
    fake.inject(Fault("pulls/get", 502, times=10))
    assert _watch(config, port)(store, job) is None
    assert _states(store) == [(OLD, "running")]


def test_a_rate_limit_holds_the_reads_back_for_githubs_wait(
        config: Config, fake: FakeGitHub, port: GitHubPort) -> None:
    store, job = _running(config, fake)
    fake.state.pulls[7].head_sha = NEW
    fake.inject(Fault("pulls/get", 403, message="API rate limit exceeded",
                      headers={"x-ratelimit-remaining": "0",
                               "x-ratelimit-reset": str(int(time.time()) + 120)}))
    clock = [0.0]
    watch = _watch(config, port, clock)
    assert watch(store, job) is None
    reads = fake.calls("pulls/get")
    clock[0] = 30.0  # the next renewal, inside GitHub's wait: no request at all
    assert watch(store, job) is None and fake.calls("pulls/get") == reads
    clock[0] = 200.0  # past it: read, and the push is handled
    assert (watch(store, job) or "").startswith("queued job")
    assert _states(store) == [(OLD, "superseded"), (NEW, "queued")]


def test_a_job_of_no_pr_is_never_read(
        config: Config, fake: FakeGitHub, port: GitHubPort) -> None:
    store = Store(config.store)
    store.enqueue(REPO, None, OLD, "default@1", base_sha=BASE)
    job = store.lease("w1", 60.0, box="local")
    assert job is not None
    assert _watch(config, port)(store, job) is None and fake.calls("pulls/get") == 0
