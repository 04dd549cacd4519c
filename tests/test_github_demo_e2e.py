"""Issue 5's "done when", on the demo engine: signed `pull_request.synchronize` deliveries to the
running `evalbot serve` (webhook, dispatcher, worker on a local box marked trusted) against the
fake GitHub. A second push supersedes the first job while it runs; the end state is one evalbot
comment describing the newer SHA, the verdict's labels and a success status on that SHA. The
flow is what it checks, not the demo's statistics: the demo profile cut to its witnessed cell
(tests/demo_profile.py)."""

from __future__ import annotations

import re
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalbot.config.settings import Config, load_config
from evalbot.engine.demo import generate
from evalbot.engine.demo.repo import DemoRepo
from evalbot.store.jobs import Store
from tests.demo_profile import cut_demo_profile
from tests.github import payloads
from tests.github.accounts import BOT, MAINTAINER, PACING
from tests.github.fake_github import REPO, FakeGitHub, Pull
from tests.github.sender import Sender
from tests.service_env import evalbot, stop, wait_for

pytest_plugins = ["tests.github.fixtures"]
MARK = "evalbot serve: webhook on 127.0.0.1:"


@pytest.fixture
def demo(tmp_path: Path) -> DemoRepo:
    return generate(tmp_path / "demo")


@pytest.fixture
def demo_config(tmp_path: Path, fake: FakeGitHub, demo: DemoRepo) -> Config:
    path = tmp_path / "evalbot.yaml"
    path.write_text(f"""
profile: {cut_demo_profile(tmp_path / 'profile')}
store: {tmp_path / 'evalbot.sqlite3'}
github:
  repo: {REPO}
  api_url: {fake.api_url}
  bot_login: "{BOT}"
{PACING}service: {{metrics_port: 0}}
boxes:
  - {{name: local, kind: local, workdir: {tmp_path / 'box'}, repo: {demo.path},
      models_dir: {demo.model_path.parent}, trusted: true, python: {sys.executable},
      unsandboxed: true}}
""")
    return load_config(path)


@pytest.fixture
def served(demo_config: Config, fake: FakeGitHub, tmp_path: Path
           ) -> Iterator[tuple[Sender, object, Path]]:
    secret = secrets.token_hex(16)
    log = tmp_path / "serve.log"
    proc = evalbot("serve", "--config", str(demo_config.source), "--port", "0", "--poll", "0.1",
                   "--lease-ttl", "3", "--no-throttle", log=log,
                   env={"EVALBOT_GITHUB_TOKEN": fake.token,  # type: ignore[attr-defined]
                        "EVALBOT_WEBHOOK_SECRET": secret})
    try:
        wait_for("the service to listen", lambda: MARK in log.read_text(), proc=proc, log=log)
        port = re.findall(rf"{re.escape(MARK)}(\d+)", log.read_text())[-1]
        yield Sender(f"http://127.0.0.1:{port}/", secret.encode()), proc, log
    finally:
        stop(proc)


def _jobs(config: Config) -> list[tuple[str, str, str]]:
    store = Store(config.store)
    try:
        return [(j.id, j.head_sha, j.state) for j in store.jobs()]
    finally:
        store.close()


def _push(send: Sender, head: str, base: str) -> None:
    got = send.post("pull_request", payloads.pull_request(
        "synchronize", number=2, head_sha=head, base_sha=base, author=MAINTAINER))
    assert got.status_code == 202, got.text


def test_demo_push_push_one_comment_for_the_newer_sha(
        served: tuple[Sender, object, Path], fake: FakeGitHub, demo_config: Config,
        demo: DemoRepo) -> None:
    send, proc, log = served
    old, new = demo.prs["slow_long"], demo.prs["faster"]
    fake.add_pull(Pull(2, old, demo.main_sha, MAINTAINER))
    _push(send, old, demo.main_sha)
    wait_for("the first job to run", lambda: [s for *_, s in _jobs(demo_config)] == ["running"],
             proc=proc, log=log)  # type: ignore[arg-type]
    fake.state.pulls[2].head_sha = new  # the push, as GitHub has it
    _push(send, new, demo.main_sha)  # supersedes the running job: the worker kills its run
    wait_for("the newer SHA's verdict to be published",
             lambda: fake.state.statuses.get(new, [{}])[-1].get("state") == "success",
             timeout_s=900.0, proc=proc, log=log)  # type: ignore[arg-type]

    assert [(h, s) for _, h, s in _jobs(demo_config)] == [(old, "superseded"), (new, "done")]
    store = Store(demo_config.store)
    [entry] = store.history(pr=2)
    store.close()
    verdict = entry["verdict"]
    assert entry["head_sha"] == new
    if verdict["kind"] == "improved":
        assert verdict["headline"] in {"eval:XL", "eval:L", "eval:M", "eval:S", "eval:XS"}
    else:  # the honest alternative on a busy machine: its witness's saving within its noise
        assert (verdict["kind"], verdict["headline"]) == ("inconclusive", "eval:inconclusive")
        assert [w for w in verdict["witnesses"] if w["source"] == "witness"
                and w["saving_s"] > 0 > w["lo_s"]], verdict["witnesses"]
    [comment] = [c for c in fake.comments_on(2) if c["author"] == BOT]
    assert comment["body"].startswith('<!-- evalbot:v1 {"head": "' + new)
    assert verdict["headline"] in comment["body"] and old[:10] not in comment["body"]
    assert fake.labels_on(2) == set(verdict["labels"]) and "eval:pending" not in fake.labels_on(2)
    assert fake.state.statuses[new][-1]["description"].startswith(verdict["headline"])
    # never a verdict: superseded, and its status says so (issue 47)
    # (queued, then "evaluating on box ..." when the worker took it, never after the supersede)
    states = [s["state"] for s in fake.state.statuses[old]]
    assert states[-1] == "error" and set(states[:-1]) == {"pending"}, states
    assert fake.state.statuses[old][-1]["description"].startswith(f"superseded by {new[:10]}")
