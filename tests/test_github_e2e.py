"""End to end: signed pushes -> webhook -> job -> the real harness on the stub engine -> grade ->
store -> one sticky comment, evalbot's labels and the commit status on the fake GitHub.

The stub engine stands in for the demo engine (one demo evaluation takes minutes on this
machine; docs/github.md shows the demo-engine run). Everything between is the real code.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalbot.config.redact import for_boxes
from evalbot.config.settings import Config
from evalbot.engine.contract.job import parse_job
from evalbot.engine.harness.steps import run_job
from evalbot.github.port import GitHubPort
from evalbot.github.service import Running, make_publisher, publish_finished
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.store.jobs import Store
from tests.github import payloads
from tests.github.accounts import BOT, MAINTAINER, fast_backoff
from tests.github.fake_github import FakeGitHub, Pull
from tests.github.sender import Sender, settle
from tests.stub_engine import job_doc, make_repo

CANARY_HOST = "gpu-canary-7.internal.example"
CANARY_IP = "203.0.113.77"

pytest_plugins = ["tests.github.fixtures"]


@pytest.fixture
def engine(tmp_path: Path) -> tuple[Path, str, dict[str, str]]:
    return make_repo(tmp_path / "engine", {"slow": {"decode": 1000.0},
                                           "faster": {"decode": 1300.0, "prefill": 1.3e6}})




def work_one(store: Store, config: Config, port: GitHubPort, repo: Path, jobdir: Path,
             token: str) -> str:
    """What the worker does with one leased job, then publish_finished."""
    job = store.lease("w1", ttl_s=600)
    assert job is not None
    results = run_job(parse_job(job_doc(repo, job.base_sha, job.head_sha)), jobdir / job.id)
    verdict = grade(results, load_labels(config.labels_file).policy(config.policy))
    assert store.finish(job.id, "w1", verdict, results)
    redact = for_boxes([*config.boxes, _canary_box()], secrets=[token])
    assert publish_finished(store, make_publisher(config, port, fast_backoff()), job.id, redact)
    return job.head_sha


def _canary_box() -> object:
    from evalbot.config.settings import BoxConfig

    return BoxConfig(name="box-a", kind="ssh", workdir="/srv/evalbot", repo="/srv/e",
                     host=CANARY_HOST, port=2222, user="evalbot")  # "evalbot": see _with_marker


def test_push_push_verdict_one_comment_right_labels_success(
        bot: tuple[Running, Sender, Store], fake: FakeGitHub, config: Config,
        port: GitHubPort, engine: tuple[Path, str, dict[str, str]], tmp_path: Path) -> None:
    running, send, store = bot
    repo, main, shas = engine
    fake.add_pull(Pull(2, shas["slow"], main, MAINTAINER))
    for i, sha in enumerate((shas["slow"], shas["faster"])):  # the second push supersedes
        fake.state.pulls[2].head_sha = sha  # the push, as GitHub has it
        send.post("pull_request", payloads.pull_request(
            "synchronize", number=2, head_sha=sha, base_sha=main, author=MAINTAINER))
        settle(running, i + 1)
    assert [j.state for j in store.jobs()] == ["superseded", "queued"]
    head = work_one(store, config, port, repo, tmp_path / "jobs", fake.token)  # type: ignore[attr-defined]
    assert head == shas["faster"]
    [comment] = [c for c in fake.comments_on(2) if c["author"] == BOT]
    verdict = store.history(pr=2)[0]["verdict"]
    assert comment["body"].startswith('<!-- evalbot:v1 {"head": "' + head)  # marker intact
    assert shas["slow"][:10] not in comment["body"]
    assert verdict["kind"] == "improved"
    assert fake.labels_on(2) == set(verdict["labels"]) and "eval:pending" not in fake.labels_on(2)
    assert fake.state.statuses[head][-1]["state"] == "success"
    assert fake.state.statuses[head][-1]["description"].startswith(verdict["headline"])
    # the superseded head says so, once (issue 47: it stayed pending for ever)
    assert [s["state"] for s in fake.state.statuses[shas["slow"]]] == ["pending", "error"]
    assert fake.state.statuses[shas["slow"]][-1]["description"].startswith(
        f"superseded by {head[:10]}")


def test_nothing_secret_reaches_github(bot: tuple[Running, Sender, Store], fake: FakeGitHub,
                                       config: Config, port: GitHubPort, tmp_path: Path) -> None:
    running, send, store = bot
    token = fake.token  # type: ignore[attr-defined]
    repo, main, shas = make_repo(tmp_path / "leak", {"leaky": {
        "build_fails": True,
        "message": f"cannot reach {CANARY_HOST} ({CANARY_IP}:2222) as root@{CANARY_HOST} "
                   f"with {token} via {fake.api_url}"}})
    send.post("pull_request", payloads.pull_request("opened", number=9, head_sha=shas["leaky"],
                                                    base_sha=main, author=MAINTAINER))
    settle(running, 1)
    work_one(store, config, port, repo, tmp_path / "jobs", token)
    published = " ".join([c["body"] for c in fake.state.comments.values()]
                         + [s["description"] for v in fake.state.statuses.values() for s in v]
                         + list(fake.state.repo_labels))
    assert "build" in published  # the failure itself is reported ...
    for canary in (token, CANARY_HOST, CANARY_IP, "127.0.0.1", fake.api_url):
        assert canary not in published  # ... but none of the secrets or addresses
    # the port, as a number of its own: a commit SHA may hold the digits 2222 by chance
    assert not re.search(r"(?<![0-9a-fA-F])2222(?![0-9a-fA-F])", published)
