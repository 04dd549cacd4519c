"""The service under faults, as real processes: `evalbot serve` (webhook, dispatcher, worker)
against the fake GitHub, the local box and the stub engine, killed with SIGKILL mid-job and
restarted. The assertions are on final state: one verdict, one comment, nothing lost."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from evalbot.config.settings import Config
from evalbot.store.jobs import Store
from tests.github import payloads
from tests.github.accounts import BOT, MAINTAINER, PACING
from tests.github.fake_github import REPO, FakeGitHub
from tests.github.sender import Sender
from tests.service_env import Service, write_config
from tests.service_env import wait_for as wait_for_state
from tests.stub_engine import make_repo

pytest_plugins = ["tests.github.fixtures"]
SLOW = {"work_s": 0.15}  # per sample: a job takes a few seconds, long enough to kill it mid-way
# Each wait is on a state; its deadline only tells a stuck service from a slow one. Three stub
# jobs one after another, after a restart that waits out the killed job's lease, take ~15 s on
# a quiet machine and several times that at load 9-19 (issue 48: 50 s timed out there).
STUCK_S = 300.0
T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T], proc: subprocess.Popen[bytes] | None = None,
             log: Path | None = None) -> T:
    return wait_for_state(what, check, timeout_s=STUCK_S, proc=proc, log=log)


@pytest.fixture
def stub(tmp_path: Path) -> tuple[Path, str, dict[str, str]]:
    return make_repo(tmp_path / "engine", {
        "faster": {"decode": 1300.0, "prefill": 1.3e6, **SLOW},
        "neutral": SLOW, "also": {"decode": 1250.0, **SLOW}}, main=SLOW)


@pytest.fixture
def service(tmp_path: Path, fake: FakeGitHub, stub: tuple[Path, str, dict[str, str]]
            ) -> Iterator[Service]:
    github = (f"github:\n  repo: {REPO}\n  api_url: {fake.api_url}\n  bot_login: \"{BOT}\"\n"
              f"{PACING}")
    svc = Service(write_config(tmp_path, stub[0], github=github), fake.token,  # type: ignore[attr-defined]
                  tmp_path)
    yield svc
    svc.stop()


def _push(send: Sender, number: int, head: str, base: str) -> None:
    got = send.post("pull_request", payloads.pull_request(
        "synchronize", number=number, head_sha=head, base_sha=base, author=MAINTAINER))
    assert got.status_code == 202, got.text


def _step(config: Config, job_id: str) -> str:
    path = Path(config.boxes[0].workdir) / "jobs" / job_id / "status.json"
    return str(json.loads(path.read_text()).get("step")) if path.is_file() else ""


def _jobs(config: Config) -> list[tuple[str, int | None, str, str]]:
    store = Store(config.store)
    try:
        return [(j.id, j.pr, j.head_sha, j.state) for j in store.jobs()]
    finally:
        store.close()


def _published(config: Config, job_id: str) -> bool:
    store = Store(config.store)
    try:
        return store.get(job_id).published is not None
    finally:
        store.close()


def _bot_comments(fake: FakeGitHub, number: int) -> list[dict[str, object]]:
    return [c for c in fake.comments_on(number) if c["author"] == BOT]


def test_sigkill_mid_job_then_restart_completes_the_job_once_with_one_comment(
        service: Service, fake: FakeGitHub, stub: tuple[Path, str, dict[str, str]]) -> None:
    _repo, main, shas = stub
    send = service.start()
    _push(send, 3, shas["faster"], main)
    wait_for("a job", lambda: len(_jobs(service.config)) == 1, log=service.log)
    job_id = _jobs(service.config)[0][0]
    wait_for("the harness to measure", lambda: _step(service.config, job_id) == "speed",
             proc=service.proc, log=service.log)
    service.kill()
    assert _jobs(service.config)[0][3] == "running"  # its lease is now held by a dead worker
    service.start()
    # the job is marked published after its comment and status reach GitHub: wait for all three
    wait_for("the job to finish and be published",
             lambda: _jobs(service.config)[0][3] == "done" and bool(_bot_comments(fake, 3))
             and fake.state.statuses.get(shas["faster"], [{}])[-1].get("state") == "success"
             and _published(service.config, job_id),
             proc=service.proc, log=service.log)

    store = Store(service.config.store)
    [verdict] = store.history(pr=3)
    leases = store.leases(job_id)
    assert [lease["outcome"] for lease in leases] == ["expired", "done"]
    assert store.get(job_id).tries == 2 and store.get(job_id).published is not None
    store.close()
    jobs_dir = Path(service.config.boxes[0].workdir) / "jobs"
    assert [p.name for p in jobs_dir.iterdir()] == [job_id]  # re-attached, never started again
    [comment] = _bot_comments(fake, 3)  # the pending comment, edited in place
    assert shas["faster"] in comment["body"] and verdict["verdict"]["kind"] == "improved"
    assert fake.labels_on(3) == set(verdict["verdict"]["labels"])


def test_restart_while_jobs_are_queued_loses_none(
        service: Service, fake: FakeGitHub, stub: tuple[Path, str, dict[str, str]]) -> None:
    _repo, main, shas = stub
    send = service.start()
    for number, name in ((4, "faster"), (5, "neutral"), (6, "also")):
        _push(send, number, shas[name], main)
    # One job running and at least one still queued (on a loaded machine the first may already
    # be done by the time this is seen: waiting for exactly two queued could then never end).
    wait_for("three jobs, one running, some queued", lambda: len(jobs := _jobs(service.config)) == 3
             and [j[3] for j in jobs].count("queued") >= 1
             and any(j[3] == "running" and _step(service.config, j[0]) for j in jobs),
             proc=service.proc, log=service.log)
    service.kill()
    service.start()
    wait_for("every job done and published", lambda: all(
        j[3] == "done" for j in _jobs(service.config)) and all(
        _bot_comments(fake, n) and "eval:pending" not in fake.labels_on(n) for n in (4, 5, 6)),
        proc=service.proc, log=service.log)
    store = Store(service.config.store)
    assert sorted(h["pr"] for h in store.history()) == [4, 5, 6]
    store.close()
    for number, name in ((4, "faster"), (5, "neutral"), (6, "also")):
        [comment] = _bot_comments(fake, number)
        assert shas[name][:10] in comment["body"]
