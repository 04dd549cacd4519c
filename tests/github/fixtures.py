"""Shared pytest fixtures: the fake GitHub, a config pointing at it, the real PyGithub port."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalbot.config.settings import Config, load_config
from evalbot.github.port import GitHubPort
from evalbot.github.pygithub_client import PyGithubPort
from evalbot.github.service import Running, make_handlers, start
from evalbot.store.jobs import Store
from tests.github.accounts import BOT, MAINTAINER, OUTSIDER, PACING, fast_backoff
from tests.github.fake_github import REPO, FakeGitHub
from tests.github.sender import Sender


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    gh = FakeGitHub()
    gh.token = "ghs_" + secrets.token_hex(18)  # type: ignore[attr-defined]
    gh.add_user(BOT, "write", gh.token)  # type: ignore[attr-defined]
    gh.add_user(MAINTAINER, "admin", "ghs_" + secrets.token_hex(18))
    gh.add_user(OUTSIDER, "read")
    yield gh
    gh.close()
    assert gh.violations == [], "the bot made requests GitHub's OpenAPI description rejects"


@pytest.fixture
def config(tmp_path: Path, fake: FakeGitHub) -> Config:
    path = tmp_path / "evalbot.yaml"
    path.write_text(f"""
profile: demo
store: {tmp_path / 'evalbot.sqlite3'}
github:
  repo: {REPO}
  api_url: {fake.api_url}
  bot_login: "{BOT}"
{PACING}  quota_per_author_per_day: 3
  quota_per_pr_per_day: 2
boxes:
  - {{name: local, kind: local, workdir: {tmp_path / 'box'}, trusted: true,
      unsandboxed: true}}
""")
    return load_config(path)


@pytest.fixture
def port(fake: FakeGitHub) -> GitHubPort:
    return own_port(fake)


def own_port(fake: FakeGitHub, throttle: bool = False) -> GitHubPort:
    """A port of its own (one per thread, as the service builds them: the reconcile's)."""
    return PyGithubPort(REPO, fake.token, fake.api_url, throttle=throttle)  # type: ignore[attr-defined]


@pytest.fixture
def handlers(config: Config, port: GitHubPort):  # type: ignore[no-untyped-def]
    store = Store(config.store)
    yield make_handlers(config, store, port, fast_backoff())
    store.close()


@pytest.fixture
def bot(config: Config, port: GitHubPort) -> Iterator[tuple[Running, Sender, Store]]:
    """The webhook server and dispatcher, running against the fake GitHub."""
    secret = secrets.token_bytes(32)
    running = start(config, secret, port, backoff=fast_backoff())
    store = Store(config.store)
    yield running, Sender(f"http://127.0.0.1:{running.port}/", secret), store
    store.close()
    running.stop()


@pytest.fixture
def quick(config: Config, port: GitHubPort) -> Iterator[tuple[Running, Sender, Store]]:
    """The service with a short first back-off for deliveries (the cap stays five minutes)."""
    secret = secrets.token_bytes(32)
    running = start(config, secret, port, backoff=fast_backoff(), retry_s=0.2)
    store = Store(config.store)
    yield running, Sender(f"http://127.0.0.1:{running.port}/", secret), store
    store.close()
    running.stop()
