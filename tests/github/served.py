"""`evalbot serve` as its own process against the fake GitHub, on a box that gets no jobs: what
the intake tests (reconcile, hosts) run against."""

from __future__ import annotations

import re
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from evalbot.config.settings import Config, load_config
from evalbot.store.health import Health, HealthStore
from tests.github.accounts import BOT, PACING
from tests.github.fake_github import REPO, FakeGitHub
from tests.github.sender import Sender
from tests.service_env import evalbot, stop, wait_for


def serve_config(root: Path, fake: FakeGitHub) -> Config:
    """No quotas (one maintainer owns every PR); a box that gets no jobs: its last health check
    failed, so the workers never lease and the only GitHub traffic is the intake's."""
    path = root / "evalbot.yaml"
    path.write_text(f"profile: demo\nstore: {root / 'evalbot.sqlite3'}\ngithub:\n"
                    f"  repo: {REPO}\n  api_url: {fake.api_url}\n  bot_login: \"{BOT}\"\n"
                    f"{PACING}  quota_per_author_per_day: 0\n  quota_per_pr_per_day: 0\n"
                    # a host that stops beating is gone after 3 beats: 4.5 s, not 15
                    "service:\n  metrics_port: 0\n  aa_every_h: 0\n  host_beat_s: 1.5\nboxes:\n"
                    f"  - {{name: local, kind: local, workdir: {root / 'box'}, trusted: true, "
                    "unsandboxed: true}\n")
    config = load_config(path)
    health = HealthStore(config.store)
    health.record(Health("local", "demo", False, ("kept idle by the test",), None))
    health.close()
    return config


@contextmanager
def served(root: Path, fake: FakeGitHub, throttle: bool
           ) -> Iterator[tuple[Config, Sender, str, subprocess.Popen[bytes], Path]]:
    """`evalbot serve` as its own process: the webhook's and the metrics' addresses."""
    config = serve_config(root, fake)
    secret, log = secrets.token_hex(16), root / "serve.log"
    proc = evalbot("serve", "--config", str(config.source), "--port", "0",
                   *([] if throttle else ["--no-throttle"]),
                   env={"EVALBOT_GITHUB_TOKEN": fake.token,  # type: ignore[attr-defined]
                        "EVALBOT_WEBHOOK_SECRET": secret}, log=log)
    try:
        found = wait_for("serve to listen", lambda: re.search(
            r"webhook on 127.0.0.1:(\d+).*\n.*metrics on 127.0.0.1:(\d+)", log.read_text()),
            timeout_s=120.0, proc=proc, log=log)
        send = Sender(f"http://127.0.0.1:{found.group(1)}/", secret.encode())
        yield config, send, f"http://127.0.0.1:{found.group(2)}/metrics", proc, log
    finally:
        stop(proc)
