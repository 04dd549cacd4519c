"""Webhook secret rotation over real HTTP: old and new secrets both accepted until the deadline,
then only the new one; the environment is read with errors that name the variable."""

from __future__ import annotations

import re
import secrets

import pytest

from evalbot.config.errors import ConfigError
from evalbot.config.settings import Config
from evalbot.github.port import GitHubPort
from evalbot.github.service import start
from evalbot.service.secrets_rotation import SecretRing, ring_from_env
from tests.github import payloads
from tests.github.accounts import fast_backoff
from tests.github.sender import Sender

pytest_plugins = ["tests.github.fixtures"]
SHA = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
NAME = "EVALBOT_WEBHOOK_SECRET"


def test_old_and_new_secret_until_the_deadline_then_only_the_new(config: Config,
                                                                  port: GitHubPort) -> None:
    old, new = secrets.token_hex(16), secrets.token_hex(16)
    now = [1_000_000.0]
    ring = ring_from_env({NAME: new, f"{NAME}_PREVIOUS": old,
                          f"{NAME}_PREVIOUS_UNTIL": str(now[0] + 3600)}, NAME,
                         clock=lambda: now[0])
    running = start(config, ring.accepted, port, backoff=fast_backoff())  # type: ignore[arg-type]
    try:
        send = Sender(f"http://127.0.0.1:{running.port}/", new.encode())
        body = payloads.pull_request("synchronize", number=2, head_sha=SHA)
        assert send.post("pull_request", body).status_code == 202
        assert send.post("pull_request", body, secret=old.encode()).status_code == 202
        assert send.post("pull_request", body, secret=b"neither").status_code == 401
        assert "accepted for 1.0 more h" in ring.describe()
        now[0] += 3601  # the window closes: no restart needed
        assert send.post("pull_request", body, secret=old.encode()).status_code == 401
        assert send.post("pull_request", body).status_code == 202
        assert "expired" in ring.describe()
    finally:
        running.stop()


@pytest.mark.parametrize(("env", "message"), [
    ({}, f"environment variable {NAME} (named in the config) is not set"),
    ({NAME: "n", f"{NAME}_PREVIOUS": "o"}, f"{NAME}_PREVIOUS needs {NAME}_PREVIOUS_UNTIL"),
    ({NAME: "n", f"{NAME}_PREVIOUS": "n", f"{NAME}_PREVIOUS_UNTIL": "0"}, "nothing is being"),
    ({NAME: "n", f"{NAME}_PREVIOUS_UNTIL": "0"}, f"{NAME}_PREVIOUS is not"),
    ({NAME: "n", f"{NAME}_PREVIOUS": "o", f"{NAME}_PREVIOUS_UNTIL": "tomorrow"},
     "not an ISO 8601 time"),
    ({NAME: "n", f"{NAME}_PREVIOUS": "o", f"{NAME}_PREVIOUS_UNTIL": "2026-12-01T00:00"},
     "give a time zone"),
    ({NAME: "n", f"{NAME}_PREVIOUS": "o", f"{NAME}_PREVIOUS_UNTIL": "2099-01-01T00:00Z"},
     "more than 30 days away"),
])
def test_bad_rotation_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        ring_from_env(env, NAME, clock=lambda: 1_000_000.0)


def test_iso_deadline_with_zone() -> None:
    ring = ring_from_env({NAME: "n", f"{NAME}_PREVIOUS": "o",
                          f"{NAME}_PREVIOUS_UNTIL": "2026-12-01T00:00Z"}, NAME,
                         clock=lambda: 1_796_000_000.0)  # 2026-11-30
    assert ring.accepted() == [b"n", b"o"]
    assert SecretRing(b"n", b"o", 1.0, clock=lambda: 2.0).accepted() == [b"n"]
