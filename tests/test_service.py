"""The service's intake and its history: a burst of 1,000 signed deliveries (10% redeliveries)
through the real webhook server and dispatcher against the fake GitHub; fair leasing; history
queries; a policy change re-graded from stored results without any box time."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from evalbot.config.settings import Config, load_config
from evalbot.github.port import GitHubPort
from evalbot.github.service import Running, start
from evalbot.grading.policy import load_labels
from evalbot.service.worker import Settings, Worker
from evalbot.store.jobs import Store
from tests.github import payloads
from tests.github.accounts import BOT, MAINTAINER, fast_backoff
from tests.github.fake_github import REPO, FakeGitHub, Pull
from tests.github.sender import Sender, settle
from tests.service_env import write_config
from tests.stub_engine import make_repo
from tests.verdict_doc import verdict_doc

pytest_plugins = ["tests.github.fixtures"]
ACTIONS = ("opened", "synchronize", "reopened")


@pytest.fixture
def unlimited(tmp_path: Path, fake: FakeGitHub) -> Config:
    """The fixtures' config without quotas: a burst from one maintainer is all admitted."""
    path = tmp_path / "burst.yaml"
    path.write_text(f"profile: demo\nstore: {tmp_path / 'burst.sqlite3'}\ngithub:\n"
                    f"  repo: {REPO}\n  api_url: {fake.api_url}\n  bot_login: \"{BOT}\"\n"
                    "  quota_per_author_per_day: 0\n  quota_per_pr_per_day: 0\nboxes:\n"
                    f"  - {{name: local, kind: local, workdir: {tmp_path / 'box'}, "
                    "trusted: true, unsandboxed: true}\n")
    return load_config(path)


@pytest.fixture
def intake(unlimited: Config, port: GitHubPort) -> Iterator[tuple[Running, Sender]]:
    secret = secrets.token_bytes(32)
    running = start(unlimited, secret, port, backoff=fast_backoff())
    yield running, Sender(f"http://127.0.0.1:{running.port}/", secret)
    running.stop()


def _burst(send: Sender, heads: dict[int, str], per_head: int, redeliveries: int
           ) -> list[int]:
    """per_head deliveries (distinct ids) per PR head, then `redeliveries` repeated ids, all
    sent concurrently; returns the HTTP statuses."""
    plan = [(str(n) + "-" + str(i), n, sha, ACTIONS[i % 3])
            for n, sha in heads.items() for i in range(per_head)]
    again = plan[::len(plan) // redeliveries][:redeliveries]

    def post(item: tuple[str, int, str, str]) -> int:
        delivery, number, sha, action = item
        payload = payloads.pull_request(action, number=number, head_sha=sha,
                                        base_sha="b" * 40, author=MAINTAINER)
        return send.post("pull_request", payload, delivery=f"d-{sha[:8]}-{delivery}").status_code

    with ThreadPoolExecutor(max_workers=16) as pool:
        first = list(pool.map(post, plan))
        return first + list(pool.map(post, again))


def test_a_burst_of_1000_deliveries_makes_exactly_one_job_per_head(
        intake: tuple[Running, Sender], unlimited: Config, fake: FakeGitHub) -> None:
    running, send = intake
    first = {n: secrets.token_hex(20) for n in range(1, 51)}
    second = {n: secrets.token_hex(20) for n in range(1, 51)}  # a push to every PR
    for n, sha in first.items():
        fake.add_pull(Pull(n, sha, "b" * 40, MAINTAINER))
    statuses = _burst(send, first, per_head=9, redeliveries=45)
    settle(running, 450, timeout_s=50)
    for n, sha in second.items():  # the pushes, as GitHub has them
        fake.state.pulls[n].head_sha = sha
    statuses += _burst(send, second, per_head=9, redeliveries=55)
    assert len(statuses) == 1000
    assert statuses.count(202) == 900 and statuses.count(200) == 100  # redeliveries dropped
    settle(running, 900, timeout_s=50)
    store = Store(unlimited.store)
    jobs = store.jobs()
    assert sorted(j.head_sha for j in jobs) == sorted([*first.values(), *second.values()])
    assert {j.head_sha for j in jobs if j.state == "queued"} == set(second.values())
    assert {j.head_sha for j in jobs if j.state == "superseded"} == set(first.values())
    store.close()


def test_leases_are_fair_across_authors_then_prs(tmp_path: Path) -> None:
    store = Store(tmp_path / "fair.sqlite3")
    jobs = {}
    for pr, author in ((1, "alice"), (2, "alice"), (3, "alice"), (4, "bob"), (5, "carol")):
        jobs[pr] = store.enqueue("o/r", pr, f"{pr:040x}", "p")
        store.record_admission(jobs[pr].id, "o/r", pr, author)
        time.sleep(0.01)  # distinct creation times: the oldest-first tie break is defined
    order = []
    while (job := store.lease("w", 60, box="b")) is not None:
        order.append(job.pr)
        store.finish(job.id, "w", verdict_doc(), {})
    assert order == [1, 4, 5, 2, 3]  # alice's three PRs do not hold bob and carol back


def test_history_by_pr_sha_and_date(tmp_path: Path) -> None:
    store = Store(tmp_path / "history.sqlite3")
    for pr, sha in ((1, "a" * 40), (2, "b" * 40)):
        job = store.enqueue("o/r", pr, sha, "p")
        store.lease("w", 60)
        store.finish(job.id, "w", verdict_doc("eval:M", "improved"), {"n": pr})
        time.sleep(0.02)
    newest = store.history()[0]
    assert [h["pr"] for h in store.history(pr=1)] == [1]
    assert [h["pr"] for h in store.history(sha="bbbbbbb")] == [2]
    assert [h["pr"] for h in store.history(since=newest["created"])] == [2]
    assert [h["pr"] for h in store.history(until=newest["created"])] == [1]


def test_a_policy_change_regrades_stored_results_without_box_time(tmp_path: Path) -> None:
    repo, _main, shas = make_repo(tmp_path / "engine", {"faster": {"decode": 1150.0}})
    config = write_config(tmp_path, repo)
    policy = load_labels(config.labels_file).policy("default")
    store = Store(config.store)
    job = store.enqueue("o/r", 1, shas["faster"], policy.ident)
    worker = Worker("w", config.boxes[0], _profile(config), policy, config.store,
                    tmp_path / "results", Settings(backoff_s=0.0))
    assert worker.step(store)
    before = store.history()[0]
    assert before["verdict"]["kind"] == "improved"
    leases, box_files = store.leases(), sorted(Path(config.boxes[0].workdir).rglob("*"))

    labels = yaml.safe_load(config.labels_file.read_text())  # the maintainers raise the bar
    labels["policies"]["default"]["version"] += 1
    labels["policies"]["default"]["tiers"] = {"XL": 0.9, "L": 0.8, "M": 0.7, "S": 0.6, "XS": 0.5}
    (tmp_path / "labels.yaml").write_text(yaml.safe_dump(labels, sort_keys=False))
    config.source.write_text(config.source.read_text()  # type: ignore[union-attr]
                             + f"labels_file: {tmp_path / 'labels.yaml'}\n")
    got = subprocess.run([sys.executable, "-m", "evalbot", "regrade", "--config",
                          str(config.source)], capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    assert before["headline"] != "eval:XS"
    assert f"{job.id}: {before['headline']} -> eval:XS" in got.stdout  # the lowest tier now

    after = store.history()[0]
    assert after["headline"] == "eval:XS" and after["results"] == before["results"]
    assert after["verdict"]["provenance"]["policy"] == f"default@{policy.version + 1}"
    assert [r["verdict"] for r in store.revisions(job.id)] == [before["verdict"]]
    assert store.leases() == leases  # no lease taken ...
    assert sorted(Path(config.boxes[0].workdir).rglob("*")) == box_files  # ... nothing on a box
    assert [j.id for j in store.unpublished()] == [job.id]  # the new verdict gets published


def _profile(config: Config):  # type: ignore[no-untyped-def]
    from evalbot.evaluation.profile import load_profile

    return load_profile(config.profile)


# ---- `evalbot serve` wired: migrations, secret rotation, signing, staleness ----------------------
def test_serve_migrates_accepts_the_rotated_secret_signs_and_says_when_main_moved(
        tmp_path: Path, fake: FakeGitHub) -> None:
    import os
    import re

    from evalbot.store import migrations
    from tests.github.accounts import BOT
    from tests.service_env import evalbot, stop, wait_for
    from tests.stub_engine import GIT_ENV

    repo, main, shas = make_repo(tmp_path / "engine", {"neutral": {}, "other": {}})
    keys = tmp_path / "keys"
    keys.mkdir()
    made = subprocess.run([sys.executable, "-m", "evalbot", "keys", "generate", "--out",
                           str(tmp_path / "signing.key")], capture_output=True, text=True,
                          check=True).stdout.strip()
    (keys / f"evalbot-{made.split()[1]}.pub").write_text(made + "\n")
    section = (f"github:\n  repo: {REPO}\n  api_url: {fake.api_url}\n  bot_login: \"{BOT}\"\n"
               f"service:\n  signing_key_file: {tmp_path / 'signing.key'}\n  metrics_port: 0\n")
    config = write_config(tmp_path, repo, github=section)
    Store(config.store).close()  # a store from before the migrations existed
    assert migrations.pending(config.store)
    old, new = secrets.token_hex(16), secrets.token_hex(16)
    env = {"EVALBOT_GITHUB_TOKEN": fake.token,  # type: ignore[attr-defined]
           "EVALBOT_WEBHOOK_SECRET": new, "EVALBOT_WEBHOOK_SECRET_PREVIOUS": old,
           "EVALBOT_WEBHOOK_SECRET_PREVIOUS_UNTIL": str(time.time() + 3600)}
    log = tmp_path / "serve.log"
    proc = evalbot("serve", "--config", str(config.source), "--port", "0", "--poll", "0.1",
                   "--no-throttle", env=env, log=log)
    try:
        wait_for("the service", lambda: "webhook on" in log.read_text(), proc=proc, log=log)
        assert migrations.pending(config.store) == []  # applied at start-up ...
        assert list(tmp_path.glob("evalbot.sqlite3.pre-v*.bak"))  # ... after a backup
        port = re.search(r"webhook on 127.0.0.1:(\d+)", log.read_text()).group(1)  # type: ignore[union-attr]
        url = f"http://127.0.0.1:{port}/"
        push = payloads.pull_request("opened", number=1, head_sha=shas["neutral"],
                                     base_sha=main, author=MAINTAINER)
        assert Sender(url, secrets.token_bytes(8)).post("pull_request", push).status_code == 401
        assert Sender(url, old.encode()).post("pull_request", push).status_code == 202
        wait_for("PR 1's verdict on GitHub", lambda: _status(fake, shas["neutral"]) == "success",
                 proc=proc, log=log)
        subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "main moves"], cwd=repo,
                       env={**os.environ, **GIT_ENV}, check=True)
        moved = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                               text=True, check=True).stdout.strip()
        push = payloads.pull_request("opened", number=2, head_sha=shas["other"],
                                     base_sha=moved, author=MAINTAINER)
        assert Sender(url, new.encode()).post("pull_request", push).status_code == 202
        wait_for("PR 1's comment to say main moved", lambda: any(
            f"main moved since this was measured: `{moved[:10]}`" in c["body"]
            for c in fake.comments_on(1)), proc=proc, log=log)
    finally:
        stop(proc)
    assert proc.returncode == 0, log.read_text()[-2000:]
    store = Store(config.store)
    first = store.history(pr=1)[0]
    assert first["stale"] and first["verdict"]["kind"] == "neutral"
    assert len([c for c in fake.comments_on(1) if c["author"] == BOT]) == 1  # edited in place
    out = config.store.parent / "results"
    files = [str(out / h["job_id"] / "verdict.json") for h in store.history()]
    got = subprocess.run([sys.executable, "-m", "evalbot", "verify", *files, "--keys",
                          str(keys)], capture_output=True, text=True, timeout=60)
    assert got.returncode == 0 and got.stdout.count("ok, signed by key") == 2, got.stderr
    assert all(h["verdict"]["signature"]["key_id"] == made.split()[1] for h in store.history())
    store.close()


def _status(fake: FakeGitHub, sha: str) -> str:
    return str(fake.state.statuses.get(sha, [{}])[-1].get("state", ""))
