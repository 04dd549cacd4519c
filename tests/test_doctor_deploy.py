"""`evalbot doctor` on what real deployments get wrong: the credentials' identity and write
access against the fake GitHub, the webhook secret per mode, the signing key file, the box's
way into the sandbox, a refused host key, and progress while it hashes models."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from evalbot.audit.signing import generate_key
from tests.github.fake_app import AppFakeGitHub
from tests.github.fake_github import REPO
from tests.sshd import Sshd
from tests.test_doctor import _setup

TOKEN_ENV, HOOK_ENV = "EVALBOT_TEST_DOCTOR_TOKEN", "EVALBOT_TEST_DOCTOR_HOOK"
# the test suite's local box: PR code would run as the bot (no sandbox user), deliberately
LOCAL: dict[str, object] = {"kind": "local", "trusted": True, "unsandboxed": True}


@pytest.fixture
def fake() -> Iterator[AppFakeGitHub]:
    gh = AppFakeGitHub()
    yield gh
    gh.close()
    assert gh.violations == []


def _doctor(config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, HOOK_ENV)}
    return subprocess.run([sys.executable, "-m", "evalbot", "doctor", "--config", str(config), *args],
                          capture_output=True, text=True, timeout=300, env={**clean, **(env or {})})


def _with(config: Path, **extra: object) -> Path:
    doc = yaml.safe_load(config.read_text())
    doc.update(extra)
    config.write_text(yaml.safe_dump(doc))
    return config


def _github(fake: AppFakeGitHub, **keys: object) -> dict[str, object]:
    return {"github": {"repo": REPO, "api_url": fake.api_url, "token_env": TOKEN_ENV,
                       "webhook_secret_env": HOOK_ENV, **keys}}


def _line(done: subprocess.CompletedProcess[str], name: str) -> str:
    return next(ln for ln in done.stdout.splitlines() if name in ln)


def test_actions_mode_needs_no_webhook_secret(tmp_path: Path, fake: AppFakeGitHub) -> None:
    token = "ghp_" + secrets.token_hex(8)
    fake.add_user("perf-bot", "write", token)
    config = _with(_setup(tmp_path, True, LOCAL), **_github(fake))
    actions = _doctor(config, "--mode", "actions", env={TOKEN_ENV: token})
    assert actions.returncode == 0, actions.stdout + actions.stderr
    assert _line(actions, HOOK_ENV).startswith("ok") and "not used in actions mode" in actions.stdout
    assert "ok    github identity: perf-bot (read from the API)" in actions.stdout
    assert "ok    github write access" in actions.stdout
    service = _doctor(config, env={TOKEN_ENV: token})
    assert service.returncode == 1 and _line(service, HOOK_ENV).startswith("FAIL")


def test_a_bot_login_that_is_not_the_tokens_user_fails(tmp_path: Path, fake: AppFakeGitHub) -> None:
    token = "ghp_" + secrets.token_hex(8)
    fake.add_user("perf-bot", "write", token)
    config = _with(_setup(tmp_path, True, LOCAL),
                   **_github(fake, bot_login="evalbot[bot]"))
    done = _doctor(config, "--mode", "actions", env={TOKEN_ENV: token})
    line = _line(done, "github identity")
    assert done.returncode == 1 and line.startswith("FAIL")
    assert "perf-bot" in line and "evalbot[bot]" in line and "drop bot_login" in line


def test_a_read_only_token_fails_write_access(tmp_path: Path, fake: AppFakeGitHub) -> None:
    token = "ghp_" + secrets.token_hex(8)
    fake.add_user("reader", "read", token)
    config = _with(_setup(tmp_path, True, LOCAL), **_github(fake))
    done = _doctor(config, "--mode", "poll", env={TOKEN_ENV: token})
    assert done.returncode == 1 and _line(done, "github write access").startswith("FAIL")
    assert token not in done.stdout + done.stderr


def test_an_app_is_checked_through_its_installation(tmp_path: Path, fake: AppFakeGitHub) -> None:
    config = _with(_setup(tmp_path, True, LOCAL),
                   **_github(fake, app_id=fake.app_id))
    done = _doctor(config, "--mode", "actions", env={TOKEN_ENV: fake.private_pem})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok    github identity: evalbot-test[bot] (read from the API)" in done.stdout
    assert "issues, pull_requests, statuses: write" in done.stdout


def test_the_signing_key_file_is_loaded_and_its_mode_checked(tmp_path: Path) -> None:
    key_file = tmp_path / "signing.pem"
    key = generate_key(key_file)
    config = _with(_setup(tmp_path, True, LOCAL),
                   service={"signing_key_file": str(key_file)})
    done = _doctor(config)
    assert f"ok    signing key file: {key_file}: Ed25519 key {key.key_id}" in done.stdout
    key_file.chmod(0o644)
    done = _doctor(config)
    assert done.returncode == 1 and "chmod 600" in _line(done, "signing key file")
    key_file.write_text("not a key")
    key_file.chmod(0o600)
    assert _line(_doctor(config), "signing key file").startswith("FAIL")


def test_model_hashing_says_what_it_is_doing(tmp_path: Path) -> None:
    done = _doctor(_setup(tmp_path, True, LOCAL))
    assert "box box-a: hashing model m (0.0 GiB) ..." in done.stderr
    assert "box box-a: hashed model m in" in done.stderr


def test_an_ssh_box_without_its_sudo_rule_fails_with_the_rule_to_add(tmp_path: Path,
                                                                     sshd: Sshd) -> None:
    # The default launcher of an ssh box is sudo; this box (like a fresh one) has no rule.
    done = _doctor(_setup(tmp_path, True, {"kind": "ssh", **sshd.box_kwargs()}))
    line = _line(done, "sandbox entry")
    assert done.returncode == 1 and line.startswith("FAIL")
    assert "/etc/sudoers.d/evalbot" in line and "evalbot box init" in line
    (tmp_path / "root").mkdir()
    root = _doctor(_setup(tmp_path / "root", True, {"kind": "ssh", **sshd.box_kwargs(),
                                                    "sandbox_launcher": []}))
    assert "ok    box box-a: sandbox entry: the harness runs as root" in root.stdout


def test_a_refused_host_key_names_the_file_and_the_keyscan_step(tmp_path: Path,
                                                               sshd: Sshd) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    done = _doctor(_setup(tmp_path, True, {"kind": "ssh", **sshd.box_kwargs(),
                                           "known_hosts": str(empty)}))
    line = _line(done, "reachable")
    assert line.startswith("FAIL") and str(empty) in line
    assert f"ssh-keyscan -p PORT HOST >> {empty}" in line
    assert str(sshd.port) not in done.stdout and "127.0.0.1" not in done.stdout


def test_an_app_without_write_on_statuses_fails(tmp_path: Path, fake: AppFakeGitHub) -> None:
    fake.grants["statuses"] = "read"
    config = _with(_setup(tmp_path, True, LOCAL),
                   **_github(fake, app_id=fake.app_id))
    done = _doctor(config, "--mode", "actions", env={TOKEN_ENV: fake.private_pem})
    line = _line(done, "github write access")
    assert done.returncode == 1 and line.startswith("FAIL") and "statuses" in line
    assert "BEGIN" not in done.stdout + done.stderr  # the private key is never echoed


def test_github_unreachable_is_a_fail_line_not_a_crash(tmp_path: Path) -> None:
    import socket

    with socket.socket() as closed:  # a port nothing listens on: connection refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    config = _with(_setup(tmp_path, True, LOCAL),
                   github={"repo": REPO, "api_url": f"http://127.0.0.1:{port}",
                           "token_env": TOKEN_ENV, "webhook_secret_env": HOOK_ENV})
    done = _doctor(config, "--mode", "actions", env={TOKEN_ENV: "ghp_" + secrets.token_hex(8)})
    assert done.returncode == 1, done.stdout + done.stderr  # 3 would be a crash
    assert "FAIL  github identity: cannot reach the GitHub API" in done.stdout
    assert "ok    box box-a: model m sha256" in done.stdout  # the other checks still ran
    assert "Traceback" not in done.stderr and str(port) not in done.stdout + done.stderr


@pytest.mark.parametrize("mode", ["actions", "service", "poll"])
@pytest.mark.parametrize("box, refused_by", [
    ({"kind": "local", "trusted": True}, "has no sandbox_user"),
    ({"kind": "local", "unsandboxed": True}, "is local but not marked `trusted: true`"),
])
def test_doctor_refuses_what_the_worker_refuses_with_its_words(
        tmp_path: Path, mode: str, box: dict[str, object], refused_by: str) -> None:
    config = _setup(tmp_path, True, box)
    worker = subprocess.run([sys.executable, "-m", "evalbot", "worker", "--config", str(config),
                             "--until-idle"], capture_output=True, text=True, timeout=300)
    assert worker.returncode == 1 and refused_by in worker.stderr, worker.stderr
    message = next(ln for ln in worker.stderr.splitlines() if refused_by in ln)
    for offline in (["--offline"], []):
        done = _doctor(config, "--mode", mode, *offline)
        assert done.returncode == 1, done.stdout + done.stderr
        said = _line(done, "FAIL  config:")
        assert message.split(": ", 1)[-1] in said, (message, said)  # the same sentence
