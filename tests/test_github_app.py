"""GitHub App authentication with PyGithub's own Auth classes, against the fake GitHub: the JWT,
the installation token, its renewal before expiry, and the bot's identity read from the API."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from evalbot.config.settings import Config, load_config
from evalbot.github.app_auth import ACTIONS_BOT, identified
from evalbot.github.service import make_port, make_publisher
from tests.github.fake_app import AppFakeGitHub
from tests.github.fake_github import REPO, Pull

KEY_ENV = "EVALBOT_TEST_APP_KEY"


@pytest.fixture
def app() -> Iterator[AppFakeGitHub]:
    fake = AppFakeGitHub()
    fake.add_pull(Pull(7, "a" * 40, "b" * 40, "Codertocat"))
    yield fake
    fake.close()
    assert fake.violations == []


def _config(tmp_path: Path, fake: AppFakeGitHub, github: str) -> Config:
    path = tmp_path / "evalbot.yaml"
    path.write_text(f"profile: demo\nstore: {tmp_path / 's.sqlite3'}\n"
                    f"github:\n  repo: {REPO}\n  api_url: {fake.api_url}\n  token_env: {KEY_ENV}\n"
                    f"{github}"
                    f"boxes:\n  - {{name: local, kind: local, workdir: {tmp_path}, trusted: true}}\n")
    return load_config(path)


def test_app_installation_token_writes_as_the_app(tmp_path: Path, app: AppFakeGitHub,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, app.private_pem)
    config = _config(tmp_path, app, f"  app_id: {app.app_id}\n")
    assert config.github is not None
    port = make_port(config.github, config.secret(KEY_ENV), throttle=False)
    port.create_comment(7, "hello")
    assert [c["author"] for c in app.comments_on(7)] == ["evalbot-test[bot]"]
    assert app.calls("apps/get-repo-installation") == 1  # installation_id looked up, not configured
    assert app.calls("apps/create-installation-access-token") == 1
    assert identified(config).bot_login == "evalbot-test[bot]"  # GET /app: slug + [bot]
    assert app.calls("apps/get-authenticated") == 1


def test_a_long_lived_installation_token_is_reused(tmp_path: Path, app: AppFakeGitHub,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, app.private_pem)
    config = _config(tmp_path, app, f"  app_id: {app.app_id}\n  installation_id: 77\n")
    assert config.github is not None
    port = make_port(config.github, config.secret(KEY_ENV), throttle=False)
    for n in range(3):
        port.create_comment(7, f"comment {n}")
    assert len(app.minted) == 1 and app.calls("apps/get-repo-installation") == 0


def test_a_token_about_to_expire_is_renewed_before_it_is_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tokens that expire within PyGithub's renewal margin (20 s): each use must mint a new one;
    # the fake records a violation if an expired token ever reaches it.
    app = AppFakeGitHub(token_lifetime=timedelta(seconds=19))
    app.add_pull(Pull(7, "a" * 40, "b" * 40, "Codertocat"))
    try:
        monkeypatch.setenv(KEY_ENV, app.private_pem)
        config = _config(tmp_path, app, f"  app_id: {app.app_id}\n")
        assert config.github is not None
        port = make_port(config.github, config.secret(KEY_ENV), throttle=False)
        for n in range(3):
            port.create_comment(7, f"comment {n}")
        assert len(app.minted) >= 3 and len(set(app.minted)) == len(app.minted)
        assert len(app.comments_on(7)) == 3 and app.violations == []
    finally:
        app.close()


def test_a_jwt_signed_with_another_key_gets_no_token(tmp_path: Path, app: AppFakeGitHub,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    forged = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode()
    monkeypatch.setenv(KEY_ENV, forged)
    config = _config(tmp_path, app, f"  app_id: {app.app_id}\n  installation_id: 77\n")
    assert config.github is not None
    port = make_port(config.github, config.secret(KEY_ENV), throttle=False)
    with pytest.raises(Exception, match="401|JSON web token"):
        port.create_comment(7, "forged")
    assert app.minted == [] and app.comments_on(7) == []


def test_a_token_user_is_the_bot_and_the_sticky_comment_is_found(
        tmp_path: Path, app: AppFakeGitHub, monkeypatch: pytest.MonkeyPatch) -> None:
    token = "ghp_" + secrets.token_hex(18)
    app.add_user("perf-bot", "write", token)
    monkeypatch.setenv(KEY_ENV, token)
    config = _config(tmp_path, app, "")  # no bot_login: GET /user says who we are
    assert config.github is not None and config.github.bot_login == ""
    assert identified(config).bot_login == "perf-bot"
    publisher = make_publisher(config, make_port(config.github, token, throttle=False))
    assert publisher.bot_login == "perf-bot"  # type: ignore[attr-defined]


def test_the_actions_token_is_github_actions_bot(tmp_path: Path, app: AppFakeGitHub,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # GITHUB_TOKEN is an installation token: GET /user answers 403; its comments are
    # github-actions[bot]'s.
    token = "ghs_" + secrets.token_hex(18)
    app.state.tokens[token] = app.bot
    monkeypatch.setenv(KEY_ENV, token)
    assert identified(_config(tmp_path, app, "")).bot_login == ACTIONS_BOT
