"""One host per store, one `evalbot serve` per store (issue 47, evalbot.store.owner).

The other host is a real second process with a clock of its own: `unshare` gives it a time
namespace whose monotonic clock is 10^6 s ahead of ours and a kernel boot id of its own (bind
mounted in a private mount namespace), as a second machine sharing the store file would have.
It is refused at start with an error naming the host, before it opens the store: the publication
claims of the host using it are not touched. Once that host stops beating, it takes over.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

from evalbot.config.settings import Config
from evalbot.store.jobs import Store
from evalbot.store.leasing import HOST
from evalbot.store.owner import STALE_BEATS
from tests.github import payloads
from tests.github.accounts import MAINTAINER
from tests.github.fake_github import FakeGitHub
from tests.github.served import serve_config, served
from tests.service_env import evalbot, stop, wait_for

pytest_plugins = ["tests.github.fixtures"]


def env(fake: FakeGitHub) -> dict[str, str]:
    return {"EVALBOT_GITHUB_TOKEN": fake.token,  # type: ignore[attr-defined]
            "EVALBOT_WEBHOOK_SECRET": "a-secret"}


def refused(proc: subprocess.Popen[bytes], log: Path) -> str:
    """The process exits non-zero (the deadline is for a stuck one only); its output."""
    assert proc.wait(timeout=120) != 0, log.read_text()
    return log.read_text()


def test_a_second_serve_on_the_store_is_refused_and_a_worker_beside_it_is_not(
        tmp_path: Path, fake: FakeGitHub) -> None:
    with served(tmp_path, fake, throttle=False) as (config, send, _metrics, first, _log):
        log = tmp_path / "second.log"
        second = evalbot("serve", "--config", str(config.source), "--port", "0",
                         "--no-throttle", env=env(fake), log=log)
        text = refused(second, log)
        assert f"another `evalbot serve` (pid {first.pid}) runs on this store" in text
        assert str(config.store) in text
        worker = evalbot("worker", "--config", str(config.source), "--until-idle",
                         env=env(fake), log=tmp_path / "worker.log")
        assert worker.wait(timeout=120) == 0, (tmp_path / "worker.log").read_text()
        push = payloads.pull_request("opened", number=3, head_sha="c" * 40, author=MAINTAINER)
        assert send.post("pull_request", push).status_code == 202  # the first one serves on
        os.kill(first.pid, signal.SIGKILL)  # no clean-up: the kernel drops its lock
        first.wait()
        log = tmp_path / "third.log"
        third = evalbot("serve", "--config", str(config.source), "--port", "0",
                        "--no-throttle", env=env(fake), log=log)
        try:
            wait_for("the restarted serve", lambda: "webhook on" in log.read_text(),
                     timeout_s=120.0, proc=third, log=log)
        finally:
            stop(third)


def other_host(root: Path, config: Config, fake: FakeGitHub, log: Path,
               boot_id: str) -> subprocess.Popen[bytes]:
    """`evalbot worker` as another machine would run it: its own boot id and monotonic clock."""
    boot = root / "other-boot-id"
    boot.write_text(boot_id + "\n")
    script = (f"mount --bind {boot} /proc/sys/kernel/random/boot_id && exec {sys.executable} "
              f"-m evalbot worker --config {config.source} --poll 0.1")
    return subprocess.Popen(["unshare", "--mount", "--time", "--monotonic", "1000000",
                             "--fork", "sh", "-c", script], stdout=open(log, "ab"),  # noqa: SIM115
                            stderr=subprocess.STDOUT, env={**os.environ, **env(fake)},
                            start_new_session=True)


def host_record(config: Config) -> dict[str, object]:
    try:
        return dict(json.loads(Path(f"{config.store}.host").read_text()))
    except (OSError, ValueError):
        return {}


def claim(config: Config) -> tuple[str, ...]:
    """The store's one claim as recorded (evalbot/store/claims.py): subject, owner, host."""
    db = sqlite3.connect(config.store)
    row = db.execute("SELECT subject, owner, host FROM claims").fetchone()
    db.close()
    return tuple(str(v) for v in row)


def test_another_host_is_refused_until_this_one_stops_beating(
        tmp_path: Path, fake: FakeGitHub) -> None:
    config = serve_config(tmp_path, fake)
    ours = evalbot("worker", "--config", str(config.source), "--poll", "0.1", env=env(fake),
                   log=tmp_path / "ours.log")
    theirs = None
    try:
        wait_for("this host's record", lambda: host_record(config).get("boot_id") == HOST,
                 timeout_s=120.0, proc=ours, log=tmp_path / "ours.log")
        # A claim of this host's on a PR (a writer's: evalbot/store/claims.py): a store open on
        # another host must not touch it.
        store = Store(config.store)
        assert store.claim("o/r#1", "ours")
        store.close()
        before = claim(config)
        other = str(uuid.uuid4())
        log = tmp_path / "theirs.log"
        text = refused(other_host(tmp_path, config, fake, log, other), log)
        assert re.search(r"the store is in use by host '.+' \(pid \d+, boot id " + HOST, text)
        assert "a store serves one host" in text and "migration" not in text
        assert claim(config) == before  # never opened there: nothing cleared
        assert host_record(config)["boot_id"] == HOST
        os.kill(ours.pid, signal.SIGKILL)  # this host goes away without a word
        ours.wait()
        theirs = other_host(tmp_path, config, fake, log, other)
        wait_for("the other host to take the store over", lambda: host_record(config).get(
            "boot_id") == other, timeout_s=STALE_BEATS * config.service.host_beat_s + 120.0,
            proc=theirs, log=log)
        log = tmp_path / "ours-again.log"
        text = refused(evalbot("worker", "--config", str(config.source), env=env(fake),
                               log=log), log)
        assert f"boot id {other}" in text
        assert theirs.poll() is None  # the host that holds the store runs on
    finally:
        for proc in (ours, theirs):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_a_process_whose_store_another_host_took_stops(tmp_path: Path,
                                                       fake: FakeGitHub) -> None:
    """Two hosts that took the store over at once: the one that finds the other's record at
    its next beat stops (non-zero: its supervisor's restart then meets the start-up rule)."""
    config = serve_config(tmp_path, fake)
    log = tmp_path / "ours.log"
    ours = evalbot("worker", "--config", str(config.source), "--poll", "0.1", env=env(fake),
                   log=log)
    try:
        wait_for("this host's record", lambda: host_record(config).get("boot_id") == HOST,
                 timeout_s=120.0, proc=ours, log=log)
        theirs = {**host_record(config), "boot_id": str(uuid.uuid4()), "beat": "theirs"}
        Path(f"{config.store}.host").write_text(json.dumps(theirs))
        assert ours.wait(timeout=120) != 0
    finally:
        stop(ours)
    assert "took the store over" in log.read_text()
    assert host_record(config)["beat"] == "theirs"  # it stopped beating: theirs stands
