"""The CLI over the fake GitHub: `evalbot action` (Actions mode), `poll`, `rerun SHA`, `labels sync`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from evalbot.config.settings import Config
from evalbot.grading.policy import load_labels
from evalbot.store.jobs import Store
from tests.github import payloads
from tests.github.accounts import MAINTAINER
from tests.github.fake_github import REPO, FakeGitHub, Pull

pytest_plugins = ["tests.github.fixtures"]
A, C = "a" * 40, "c" * 40


def _sha(n: int) -> str:
    return f"{n:02x}" * 20


def evalbot(config: Config, fake: FakeGitHub, *args: str,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "EVALBOT_GITHUB_TOKEN": fake.token, **(env or {})}  # type: ignore[attr-defined]
    return subprocess.run([sys.executable, "-c", "from evalbot.cli import main; main()", *args,
                           "--config", str(config.source)], env=full, capture_output=True,
                          text=True, timeout=60)


def test_action_mode_reads_the_event_file(config: Config, fake: FakeGitHub, tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps(payloads.pull_request("opened", number=2, head_sha=A,
                                                      author=MAINTAINER)))
    # The shipped workflow's trigger (.github/workflows/evalbot.yml): a pull_request payload.
    out = evalbot(config, fake, "action", env={"GITHUB_EVENT_NAME": "pull_request_target",
                                               "GITHUB_EVENT_PATH": str(event)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("queued job")
    out = evalbot(config, fake, "action", env={"GITHUB_EVENT_NAME": "pull_request",
                                               "GITHUB_EVENT_PATH": str(event)})
    assert out.returncode == 0 and out.stdout.startswith("already queued"), out.stderr
    assert [(j.pr, j.head_sha) for j in Store(config.store).jobs()] == [(2, A)]
    assert fake.labels_on(2) == {"eval:pending"}


def test_poll_then_rerun_sha(config: Config, fake: FakeGitHub) -> None:
    for n in range(1, 36):  # more than one page of 30: PyGithub must follow Link headers
        fake.add_user(f"dev{n}", "write")
        fake.add_pull(Pull(n, _sha(n), "b" * 40, f"dev{n}"))
    fake.add_pull(Pull(40, C, "b" * 40, MAINTAINER, state="closed"))
    store = Store(config.store)
    policy = load_labels(config.labels_file).policy(config.policy).ident
    for n in range(1, 34):  # already queued by webhooks: the CLI runs PyGithub's real throttle
        job = store.enqueue(REPO, n, _sha(n), policy)
        store.note_once(f"announced:{job.id}", float("inf"))  # their pending state published
    out = evalbot(config, fake, "poll")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("already queued") == 33 and out.stdout.count("queued job") == 2
    assert sorted(j.pr for j in store.jobs()) == list(range(1, 36))  # none for the closed PR
    assert evalbot(config, fake, "poll").stdout.count("already queued") == 35  # idempotent
    bad = evalbot(config, fake, "rerun", "abc")
    assert bad.returncode == 1 and "too short" in bad.stderr
    out = evalbot(config, fake, "rerun", _sha(7)[:12])
    assert out.returncode == 0 and "already queued" in out.stdout


def test_github_unreachable_is_one_line_not_a_traceback(config: Config, fake: FakeGitHub,
                                                        tmp_path: Path) -> None:
    # the config's API on a port nothing listens on: poll, rerun and labels sync each say so
    # in one line (exit 1), naming neither the host nor the port
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    text = Path(config.source).read_text().replace(fake.api_url, f"http://127.0.0.1:{dead}")
    Path(config.source).write_text(text)
    for args in (["poll"], ["rerun", A], ["labels", "sync"]):
        out = evalbot(config, fake, *args)
        assert out.returncode == 1, (args, out.stderr)
        assert "GitHub unreachable" in out.stderr and "Traceback" not in out.stderr
        assert str(dead) not in out.stderr + out.stdout
