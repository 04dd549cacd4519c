"""The reconcile never blocks webhooks (issue 47): `evalbot serve` with production throttling
against a fake GitHub holding 10,000 open PRs the store has never seen.

The reconcile admits them on its own thread (about 3 s a PR under throttling: hours); a new PR's
webhook meanwhile is admitted at once. How long "at once" is, is read from GitHub's side and
never from the test's clock: the reconcile's own admissions are paced by the throttle (three
writes a PR, at least 1 s apart), so the number of them that reach GitHub between the webhook's
202 and the new PR's pending status bounds the delay. /metrics says how far the reconcile got.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from evalbot.config.settings import load_config
from evalbot.store.jobs import Store
from tests.github import payloads
from tests.github.accounts import MAINTAINER
from tests.github.fake_github import FakeGitHub, Pull
from tests.github.sender import Sender
from tests.github.served import serve_config, served
from tests.service_env import wait_for

pytest_plugins = ["tests.github.fixtures"]
BASE = "b" * 40
NEW = 20001  # the PR opened while the reconcile runs
# Each reconcile admission sends three writes at least 1 s apart (production throttling): four
# of them reaching GitHub inside the window means the webhook waited about 10 s or more.
RECONCILED_IN_THE_WINDOW = 4


def head(n: int) -> str:
    return f"{n:040x}"


def gauges(url: str) -> dict[str, float]:
    text = requests.get(url, timeout=30).text
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^(evalbot_reconcile_\w+) (\S+)$", text, re.M)}


def announced(fake: FakeGitHub, sha: str) -> bool:
    return [s["state"] for s in fake.state.statuses.get(sha, [])] == ["pending"]


def test_a_webhook_is_admitted_while_10000_unknown_prs_are_reconciled(
        tmp_path: Path, fake: FakeGitHub) -> None:
    for n in range(1, 10001):
        fake.add_pull(Pull(n, head(n), BASE, MAINTAINER))
    with served(tmp_path, fake, throttle=True) as (config, send, metrics, proc, log):
        _admitted_meanwhile(fake, send, metrics, proc, log)
    store = Store(config.store)
    jobs = [(j.pr, j.head_sha, j.state) for j in store.jobs()]
    store.close()
    assert (NEW, head(NEW), "queued") in jobs
    assert len(jobs) == len({pr for pr, _h, _s in jobs})  # one job per PR, none twice
    assert all(state == "queued" and sha == head(pr or 0) for pr, sha, state in jobs)
    assert all(len(fake.comments_on(pr or 0)) == 1 for pr, _h, _s in jobs)


def _admitted_meanwhile(fake: FakeGitHub, send: Sender, metrics: str,
                        proc: subprocess.Popen[bytes], log: Path) -> None:
    wait_for("the reconcile's first admissions", lambda: announced(fake, head(2)),
             timeout_s=180.0, proc=proc, log=log)
    fake.add_pull(Pull(NEW, head(NEW), BASE, MAINTAINER))
    before = len(fake.state.statuses)  # heads with a status, in the order GitHub got them
    got = send.post("pull_request", payloads.pull_request("opened", number=NEW,
                                                          head_sha=head(NEW), author=MAINTAINER))
    assert got.status_code == 202
    wait_for("the new PR's pending status", lambda: announced(fake, head(NEW)),
             timeout_s=180.0, proc=proc, log=log)
    order = list(fake.state.statuses)
    meanwhile = order.index(head(NEW)) - before
    assert 0 <= meanwhile <= RECONCILED_IN_THE_WINDOW, meanwhile
    [sticky] = fake.comments_on(NEW)
    assert head(NEW)[:10] in sticky["body"] and fake.labels_on(NEW) == {"eval:pending"}
    progress = gauges(metrics)
    assert progress["evalbot_reconcile_running"] == 1
    assert progress["evalbot_reconcile_passes"] == 0
    assert progress["evalbot_reconcile_listed"] >= 100  # page by page, not all 10,000 first
    assert 2 <= progress["evalbot_reconcile_admitted"] <= progress["evalbot_reconcile_checked"]
    assert progress["evalbot_reconcile_checked"] < 10000


def test_the_reconcile_completes_and_says_so_in_metrics(tmp_path: Path,
                                                        fake: FakeGitHub) -> None:
    for n in range(1, 251):  # pushed while the service was down: two pages and a half
        fake.add_pull(Pull(n, head(n), BASE, MAINTAINER, draft=n % 50 == 0))
    with served(tmp_path, fake, throttle=False) as (config, _send, metrics, proc, log):
        done = wait_for("the pass to complete", lambda: (
            lambda g: g if g.get("evalbot_reconcile_passes") == 1 else None)(gauges(metrics)),
            timeout_s=600.0, proc=proc, log=log)
    assert done["evalbot_reconcile_running"] == 0
    assert done["evalbot_reconcile_listed"] == done["evalbot_reconcile_checked"] == 250
    assert done["evalbot_reconcile_admitted"] == 245 and done["evalbot_reconcile_left"] == 0
    assert done["evalbot_reconcile_completed_seconds"] > 0
    store = Store(config.store)
    assert sorted(j.pr or 0 for j in store.jobs()) == [n for n in range(1, 251) if n % 50]
    store.close()
    assert all(announced(fake, head(n)) for n in range(1, 251) if n % 50)


@contextmanager
def small_disk(root: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs for the store (the suite runs as root, so `mount` is permitted)."""
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(root)], check=True)
    try:
        yield root
    finally:
        subprocess.run(["umount", "--lazy", str(root)], check=True)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    # unbuffered: a buffered file's close would flush its rest into the full disk and raise
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 65536)
        except OSError:
            pass
    return filler


def test_a_disk_that_fills_during_the_reconcile_delays_it_and_kills_nothing(
        tmp_path: Path, fake: FakeGitHub, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from evalbot.github.service import start
    from tests.github.accounts import fast_backoff
    from tests.github.fixtures import own_port

    caplog.set_level(logging.INFO, logger="evalbot.github")
    for n in range(1, 41):
        fake.add_pull(Pull(n, head(n), BASE, MAINTAINER))
    with small_disk(tmp_path / "disk") as disk:
        path = tmp_path / "evalbot.yaml"
        path.write_text(serve_config(tmp_path, fake).source.read_text().replace(
            str(tmp_path / "evalbot.sqlite3"), str(disk / "evalbot.sqlite3")))
        config = load_config(path)
        running = start(config, b"secret", own_port(fake), backoff=fast_backoff(),
                        reconcile_s=3600.0, reconcile_port=own_port(fake), retry_s=0.2)
        assert running.reconciler is not None
        try:
            store = Store(config.store)
            wait_for("three admissions", lambda: len(store.jobs()) >= 3, timeout_s=120.0)
            filler = fill(disk)
            wait_for("the pass to end on the full disk", lambda: any(
                "reconcile: pass ended" in r.getMessage() and "disk is full" in r.getMessage()
                for r in caplog.records), timeout_s=120.0)
            assert running.dispatcher.alive() and all(t.is_alive() for t in running.threads)
            assert not running.reconciler.reconciled
            filler.unlink()
            wait_for("the pass to complete", lambda: running.reconciler.reconciled,  # type: ignore[union-attr]
                     timeout_s=300.0)
            jobs = [(j.pr, j.head_sha, j.state) for j in store.jobs()]
            store.close()
        finally:
            running.stop()
    assert sorted(jobs) == [(n, head(n), "queued") for n in range(1, 41)]
    for n in range(1, 41):
        assert len(fake.comments_on(n)) == 1 and fake.labels_on(n) == {"eval:pending"}
        assert fake.state.statuses[head(n)][-1]["state"] == "pending"
    assert running.dispatcher.alive()
