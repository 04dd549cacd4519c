"""Shadow mode: the real handlers and the service's publish step write nothing to GitHub; the
report compares the recorded verdicts with the labels the existing bot left on each PR."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalbot.cli import cli
from evalbot.config.redact import Redactor
from evalbot.config.settings import Config
from evalbot.github.events import parse_event
from evalbot.github.handlers import Handlers
from evalbot.github.port import GitHubPort
from evalbot.github.service import publish_finished
from evalbot.github.shadow import ShadowPublisher
from evalbot.github.shadow_report import compare, report, their_headline
from evalbot.store.jobs import Store
from tests.github import payloads
from tests.github.accounts import MAINTAINER
from tests.github.fake_github import FakeGitHub, Pull
from tests.graded_history import measure, policy
from tests.stub_engine import make_repo
from tests.verdict_doc import verdict_doc

pytest_plugins = ["tests.github.fixtures"]
WRITES = ("POST", "PATCH", "PUT", "DELETE")
# what the existing bot labelled each demo PR with (its labels stay on the PR in shadow mode)
THEIRS = {21: ["eval:L", "eval-qwen35:L", "128-context"], 23: ["eval:XS"], 24: []}
PRS = ((21, "faster"), (23, "slower"), (24, "same"))  # the config's quota: 3 per author a day


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, str]]:
    return make_repo(tmp_path_factory.mktemp("stub"), {
        "faster": {"decode": 1300.0, "prefill": 1.3e6},
        "slower": {"decode": 700.0, "prefill": 7e5},
        "same": {}})


@pytest.fixture
def shadow(config: Config, port: GitHubPort, tmp_path: Path) -> Any:
    store = Store(config.store)
    publisher = ShadowPublisher(config.store, tmp_path / "shadow.jsonl", "evalbot[bot]")
    pol = policy()
    assert config.github is not None
    handlers = Handlers(config.github, store, port, publisher, pol.ident)
    yield handlers, publisher, store
    publisher.close()
    store.close()


def test_shadow_run_publishes_nothing_and_reports_agreement(shadow, fake: FakeGitHub, stub,
                                                            tmp_path: Path, config: Config,
                                                            monkeypatch) -> None:
    handlers, publisher, store = shadow
    repo, main, shas = stub
    for number, name in PRS:
        fake.add_pull(Pull(number, shas[name], main, MAINTAINER), THEIRS[number])
        event = parse_event("pull_request", payloads.pull_request(
            "opened", number=number, head_sha=shas[name], base_sha=main, author=MAINTAINER))
        assert event is not None and handlers.handle(event).startswith("queued job")
    for number, name in PRS:
        job = store.lease("test-worker", 600)  # the test plays the worker
        assert job is not None and job.pr == number
        results, verdict = measure(repo, main, shas[name], tmp_path / f"job{number}")
        assert store.finish(job.id, "test-worker", verdict, results)
        assert publish_finished(store, publisher, job.id, Redactor())
    assert [m for m, _op, _s in fake.log if m in WRITES] == []
    assert all(fake.labels_on(n) == set(THEIRS[n]) for n in THEIRS)
    lines = [json.loads(line) for line in (tmp_path / "shadow.jsonl").read_text().splitlines()]
    assert {line["action"] for line in lines} >= {"publish", "verdict"}
    verdicts = [line for line in lines if line["action"] == "verdict"]
    assert [v["pr"] for v in verdicts] == [21, 23, 24]
    assert verdicts[0]["body"].startswith("<!-- evalbot:v1 ")  # the comment it would have posted

    rows = {r.pr: r for r in report(config.store, {n: fake.labels_on(n) for n in THEIRS})}
    assert rows[23].ours == "eval:REJECT" and rows[23].agreement == "disagree"
    assert rows[24].agreement == "no label from the existing bot"
    tiered = rows[21].ours  # the faster stub earns some tier; agreement follows from it
    assert rows[21].agreement == ("agree" if tiered == "eval:L" else "tier differs")

    monkeypatch.setenv("EVALBOT_GITHUB_TOKEN", fake.token)  # type: ignore[attr-defined]
    got = CliRunner().invoke(cli, ["shadow-report", "--store", str(config.store), "--config",
                                   str(config.source), "--json"])
    assert got.exit_code == 0, got.output
    doc = json.loads(got.output)
    assert [r["agreement"] for r in doc["rows"]] == [rows[n].agreement for n in (21, 23, 24)]
    assert sum(doc["summary"].values()) == 3


def test_report_reads_a_labels_file_and_names_bad_input(tmp_path: Path, config: Config,
                                                        shadow) -> None:
    _handlers, publisher, _store = shadow
    verdict = verdict_doc(head_sha="a" * 40, job_id="j1")
    publisher.publish_verdict(5, verdict, "comment")
    good = tmp_path / "theirs.json"
    good.write_text(json.dumps({"5": ["eval:none", "regression-4k"]}))
    got = CliRunner().invoke(cli, ["shadow-report", "--store", str(config.store),
                                   "--labels-file", str(good)])
    assert got.exit_code == 0 and "#5" in got.output and "1 agree" in got.output
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"five": "eval:none"}))
    got = CliRunner().invoke(cli, ["shadow-report", "--store", str(config.store),
                                   "--labels-file", str(bad)])
    assert got.exit_code != 0 and "entry 'five'" in str(got.exception)


@pytest.mark.parametrize(("ours", "labels", "expected"), [
    ("eval:M", ["eval:M"], "agree"),
    ("eval:M", ["eval:XL", "eval-qwen35:XL"], "tier differs"),
    ("eval:REJECT", ["eval:S"], "disagree"),
    ("eval:none", ["eval:pending"], "no label from the existing bot"),
    ("eval:none", ["eval-prefill:M", "regression-4k"], "no label from the existing bot"),
    ("eval:inconclusive", ["eval:none"], "disagree"),
])
def test_agreement_table(ours: str, labels: list[str], expected: str) -> None:
    assert compare(ours, their_headline(labels)) == expected


# ---- `evalbot serve` in shadow mode: the config switch, metrics on their own local listener ------
def test_serve_in_shadow_mode_writes_nothing_to_github(fake: FakeGitHub, stub, tmp_path: Path
                                                       ) -> None:
    import re
    import secrets
    import urllib.error
    import urllib.request

    from tests.github.accounts import BOT
    from tests.github.fake_github import REPO
    from tests.github.sender import Sender
    from tests.service_env import evalbot, stop, wait_for, write_config

    repo, main, shas = stub
    section = (f"github:\n  repo: {REPO}\n  api_url: {fake.api_url}\n  bot_login: \"{BOT}\"\n"
               f"service:\n  shadow: true\n  shadow_log: shadow.jsonl\n  metrics_port: 0\n")
    config = write_config(tmp_path, repo, github=section)
    secret, log = secrets.token_hex(16), tmp_path / "serve.log"
    proc = evalbot("serve", "--config", str(config.source), "--port", "0", "--poll", "0.1",
                   "--no-throttle", log=log, env={"EVALBOT_GITHUB_TOKEN": fake.token,  # type: ignore[attr-defined]
                                                  "EVALBOT_WEBHOOK_SECRET": secret})
    try:
        wait_for("the service", lambda: "metrics on" in log.read_text(), proc=proc, log=log)
        text = log.read_text()
        assert "shadow mode: nothing is written to GitHub" in text
        hook = re.search(r"webhook on 127.0.0.1:(\d+)", text).group(1)  # type: ignore[union-attr]
        metrics = re.search(r"metrics on 127.0.0.1:(\d+)", text).group(1)  # type: ignore[union-attr]
        fake.add_pull(Pull(21, shas["faster"], main, MAINTAINER))
        got = Sender(f"http://127.0.0.1:{hook}/", secret.encode()).post(
            "pull_request", payloads.pull_request("opened", number=21, head_sha=shas["faster"],
                                                  base_sha=main, author=MAINTAINER))
        assert got.status_code == 202
        wait_for("the shadow verdict", lambda: 21 in _shadow_verdicts(config.store),
                 timeout_s=60, proc=proc, log=log)
        body = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10).read()
        assert 'evalbot_jobs{state="done"} 1' in body.decode()
        with pytest.raises(urllib.error.HTTPError):  # not on the public webhook listener
            urllib.request.urlopen(f"http://127.0.0.1:{hook}/metrics", timeout=10)
    finally:
        stop(proc)
    assert proc.returncode == 0, log.read_text()[-2000:]  # SIGTERM: drained, clean exit
    assert [entry for entry in fake.log if entry[0] in WRITES] == []  # reads only
    assert not fake.state.comments and not fake.state.statuses
    assert not any(fake.state.issue_labels.values()) and not fake.state.repo_labels
    assert _shadow_verdicts(config.store)[21][2] == "improved"
    lines = [json.loads(x) for x in (tmp_path / "shadow.jsonl").read_text().splitlines()]
    assert {x["action"] for x in lines} >= {"publish", "verdict"}  # pending, then the verdict
    logged = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    assert logged and all({"ts", "level", "logger", "msg"} <= set(x) for x in logged)


def _shadow_verdicts(path: Path) -> dict[int, tuple[str, str, str]]:
    from evalbot.github.shadow_report import shadow_verdicts

    return shadow_verdicts(path) if path.is_file() else {}
