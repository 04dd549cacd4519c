"""Maintainer overrides: hold, waive and measure-more through the real handlers (PyGithub against
the fake GitHub), the audit trail in a real SQLite file, and pooling of two real stub-engine runs."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalbot.config.errors import ResultsError
from evalbot.config.redact import Redactor
from evalbot.engine.contract.job import parse_job
from evalbot.engine.contract.results import validate
from evalbot.engine.contract.shared import replay, stats
from evalbot.engine.harness.steps import run_job
from evalbot.github.events import parse_event
from evalbot.github.handlers import Handlers
from evalbot.github.service import publish_finished
from evalbot.grading.grade import grade
from evalbot.grading.overrides import decorate, pool, scale_job, status_of, with_note
from evalbot.report.publication import public_verdict
from evalbot.store.overrides import Overrides
from tests.github import payloads
from tests.github.accounts import MAINTAINER, OUTSIDER
from tests.github.fake_github import REPO, FakeGitHub, Pull
from tests.graded_history import measure, policy, record
from tests.stub_engine import job_doc, make_repo

pytest_plugins = ["tests.github.fixtures"]
QUIET = {"noise": 0.001}  # far below the 3% sd floor the pooling runs use


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, str]]:
    return make_repo(tmp_path_factory.mktemp("stub"),
                     {"slower": {"decode": 700.0, "prefill": 7e5}, "same": QUIET}, main=QUIET)


def _comment(handlers: Handlers, number: int, body: str, author: str, cid: int) -> str:
    event = parse_event("issue_comment", payloads.pr_comment(number=number, body=body,
                                                             author=author, pr_author=OUTSIDER,
                                                             comment_id=cid))
    assert event is not None
    return handlers.handle(event)


def _regressed_pr(handlers: Handlers, fake: FakeGitHub, stub: Any, tmp_path: Path,
                  number: int) -> str:
    """A PR whose head was measured (slower: regressed) and whose verdict was published."""
    repo, main, shas = stub
    results, verdict = measure(repo, main, shas["slower"], tmp_path / "job")
    assert verdict["kind"] == "regressed"
    fake.add_pull(Pull(number, shas["slower"], main, OUTSIDER))
    job_id = record(handlers.store, REPO, number, main, shas["slower"], results, verdict)
    assert publish_finished(handlers.store, handlers.publisher, job_id, Redactor())
    return shas["slower"]


def test_waive_needs_write_access_and_a_reason_and_keeps_the_verdict(handlers, fake, stub,
                                                                     tmp_path):
    head = _regressed_pr(handlers, fake, stub, tmp_path, 8)
    assert fake.state.statuses[head][-1]["state"] == "failure"
    # the PR author may rerun and cancel, but overrides are for maintainers
    assert _comment(handlers, 8, "/evalbot waive I like it", OUTSIDER, 1) == \
        "override refused: mallory"
    assert "for users with write access" in fake.comments_on(8)[-1]["body"]
    assert _comment(handlers, 8, "/evalbot waive", MAINTAINER, 2) == "parse error: MissingArgument"
    line = _comment(handlers, 8, "/evalbot waive the 4k loss buys <b>64k</b> @team", MAINTAINER, 3)
    assert line == f"waived regressed of {head[:10]} by {MAINTAINER}"
    status = fake.state.statuses[head][-1]
    assert (status["state"], status["description"]) == ("success",
                                                         f"eval:REJECT waived by {MAINTAINER}")
    sticky = [c["body"] for c in fake.comments_on(8) if c["body"].startswith("<!-- evalbot:v1")]
    assert len(sticky) == 1
    assert "eval:REJECT" in sticky[0] and "Maintainer overrides" in sticky[0]
    assert "&lt;b&gt;64k&lt;/b&gt;" in sticky[0] and "@team" not in sticky[0]  # neutralised
    assert "eval:REJECT" in fake.labels_on(8)  # the measurement is not rewritten
    [entry] = Overrides(handlers.store.path).trail(REPO, 8)
    assert (entry.action, entry.who, entry.head_sha) == ("waive", MAINTAINER, head)
    assert entry.reason == "the 4k loss buys <b>64k</b> @team"


def test_waive_refuses_a_head_without_a_failed_gate(handlers, fake, stub):
    repo, main, shas = stub
    fake.add_pull(Pull(9, shas["same"], main, OUTSIDER))
    assert _comment(handlers, 9, "/evalbot waive because", MAINTAINER, 4) == \
        "waive refused: no verdict"
    assert "nothing to waive" in fake.comments_on(9)[-1]["body"]
    assert Overrides(handlers.store.path).trail(REPO, 9) == []


def test_hold_cancels_and_blocks_new_heads_until_unhold(handlers, fake, stub):
    repo, main, shas = stub
    fake.add_pull(Pull(10, shas["same"], main, MAINTAINER))
    first = parse_event("pull_request", payloads.pull_request(
        "opened", number=10, head_sha=shas["same"], base_sha=main, author=MAINTAINER))
    assert first is not None and handlers.handle(first).startswith("queued job")
    assert _comment(handlers, 10, "/evalbot hold", MAINTAINER, 5).endswith("cancelled 1 job(s)")
    push = parse_event("pull_request", payloads.pull_request(
        "synchronize", number=10, head_sha=shas["slower"], base_sha=main, author=MAINTAINER))
    assert push is not None
    assert handlers.handle(push) == "held: no evaluation until /evalbot unhold"
    assert [j.state for j in handlers.store.pr_jobs(REPO, 10)] == ["cancelled"]
    assert fake.state.statuses[shas["slower"]][-1]["description"] == "held by a maintainer"
    fake.add_pull(Pull(10, shas["slower"], main, MAINTAINER))  # GitHub's view after the push
    line = _comment(handlers, 10, "/evalbot unhold", MAINTAINER, 6)
    assert line.startswith("unheld: queued job")
    assert [(j.head_sha, j.state) for j in handlers.store.pr_jobs(REPO, 10)] == \
        [(shas["same"], "cancelled"), (shas["slower"], "queued")]
    book = Overrides(handlers.store.path)
    assert [e.action for e in book.trail(REPO, 10)] == ["hold", "unhold"]
    assert not book.is_held(REPO, 10)


def test_measure_more_queues_an_attempt_that_knows_what_to_pool_with(handlers, fake, stub,
                                                                     tmp_path):
    head = _regressed_pr(handlers, fake, stub, tmp_path, 11)
    [earlier] = handlers.store.pr_jobs(REPO, 11)
    line = _comment(handlers, 11, "/evalbot measure-more", MAINTAINER, 7)
    assert line.startswith("measure-more: queued job") and earlier.id in line
    jobs = handlers.store.pr_jobs(REPO, 11)
    assert [(j.head_sha, j.attempt, j.state) for j in jobs] == [(head, 1, "done"),
                                                               (head, 2, "queued")]
    plan = Overrides(handlers.store.path).plan(jobs[1].id)
    assert plan is not None and (plan.earlier_job, plan.factor) == (earlier.id, 2.0)
    assert _comment(handlers, 11, "/evalbot measure-more", MAINTAINER, 8) == \
        "measure-more: already queued"


def test_decorate_applies_this_heads_waiver_and_the_note(tmp_path, stub):
    repo, main, shas = stub
    results, verdict = measure(repo, main, shas["slower"], tmp_path / "job")
    book = Overrides(tmp_path / "s.sqlite3")
    book.record(REPO, 3, "f" * 40, "waive", "alice", reason="another head")
    assert status_of(decorate(book.trail(REPO, 3), verdict, "body\n")[0]) is None
    book.record(REPO, 3, shas["slower"], "waive", "bob", reason="expected")
    waived, comment = decorate(book.trail(REPO, 3), verdict, "body\n")
    assert status_of(waived) == ("success", "eval:REJECT waived by bob")
    assert waived["kind"] == "regressed" and waived["waiver"]["reason"] == "expected"
    assert comment.startswith("body\n<!-- evalbot-overrides -->") and "| bob | waive |" in comment
    assert with_note(comment, book.trail(REPO, 3)) == comment  # replaced, not appended twice
    with pytest.raises(ValueError, match="needs a reason"):
        book.record(REPO, 3, shas["slower"], "waive", "bob", reason="  ")


# ---- pooling ----------------------------------------------------------------------------------
def _run(stub: Any, jobdir: Path, looks: list[int], job_id: str) -> dict[str, Any]:
    repo, main, shas = stub
    doc: dict[str, Any] = job_doc(repo, main, shas["same"], looks=looks, sd_floor=0.03)
    doc["job_id"] = job_id
    return validate(run_job(parse_job(doc), jobdir))


def test_pooling_decides_what_one_run_left_inconclusive(stub, tmp_path):
    earlier = _run(stub, tmp_path / "e", [3, 5], "early")
    assert grade(earlier, policy())["kind"] == "inconclusive"  # the 3% floor needs more pairs
    later = _run(stub, tmp_path / "l", [3, 5], "late")
    pooled = validate(pool(earlier, later))
    assert pooled["rule"]["looks"] == [3, 5, 8, 10] and pooled["pooled_from"] == ["early", "late"]
    # four looks instead of two: every look is judged more strictly than in one run
    assert pooled["rule"]["critical"][0] > earlier["rule"]["critical"][0]
    assert pooled["rule"]["budget_s"] == earlier["rule"]["budget_s"] + later["rule"]["budget_s"]
    assert pooled["rule"].get("max_budget_s") is None  # no budget in pairs in either run
    capped = pool(*({**r, "rule": {**r["rule"], "budget_pace_s": 9.25, "max_budget_s": 2000.0}}
                    for r in (earlier, later)))
    assert capped["rule"]["max_budget_s"] == 4000.0  # both runs' caps, as their budgets
    verdict = grade(pooled, policy())  # the grader's replay agrees with the pooled looks
    assert verdict["kind"] == "neutral"
    for e_cell, l_cell, p_cell in zip(earlier["cells"], later["cells"], pooled["cells"],
                                      strict=True):
        assert len(p_cell["samples"]) == len(e_cell["samples"]) + len(l_cell["samples"])
        pairs = [s["pair"] for s in p_cell["samples"] if s["side"] == "base"]
        assert len(set(pairs)) == len(pairs)
        last = p_cell["looks"][-1]
        r = np.concatenate([_ratios(e_cell), _ratios(l_cell)])[:last["pairs"]]
        assert last["pairs"] > 5 and math.isclose(last["estimate"], math.expm1(r.mean()))


def _ratios(cell: dict[str, Any]) -> np.ndarray:
    kept = [s for s in cell["samples"] if not s["dropped"]]
    base = [s["value"] for s in kept if s["side"] == "base"]
    head = [s["value"] for s in kept if s["side"] == "head"]
    return stats.log_ratios(base, head, cell["higher_is_better"])


def test_pooling_refuses_runs_that_measured_different_things(stub, tmp_path):
    repo, main, shas = stub
    earlier = _run(stub, tmp_path / "e", [3], "early")
    other = validate(run_job(parse_job(job_doc(repo, main, shas["slower"], looks=[3])),
                             tmp_path / "o"))
    with pytest.raises(ResultsError, match="head SHA differ"):
        pool(earlier, other)
    with pytest.raises(ResultsError, match="rule.sd_floor differ"):
        pool(earlier, {**earlier, "rule": {**earlier["rule"], "sd_floor": 0.5}})


def test_scale_job_multiplies_looks_and_recomputes_the_schedule(stub):
    repo, main, shas = stub
    job = parse_job(job_doc(repo, main, shas["same"], looks=[3, 5]))
    scaled = scale_job(job, 2.0)
    assert scaled.rule.looks == [6, 10] and scaled.rule.budget_s == 2 * job.rule.budget_s
    assert len(scaled.rule.critical) == len(scaled.rule.equivalence) == 2
    assert replay.bounds_of(scaled.rule.__dict__)[1].pairs == 10
    assert scaled.rule.max_budget_s is None  # a rule without the budget in pairs stays without
    capped = dataclasses.replace(job, rule=dataclasses.replace(
        job.rule, budget_pace_s=9.25, max_budget_s=4 * job.rule.budget_s))
    rule = scale_job(capped, 2.0).rule  # twice the pairs at any pace: twice the cap too
    assert (rule.budget_pace_s, rule.max_budget_s) == (9.25, 8 * job.rule.budget_s)
    with pytest.raises(ValueError, match="above 1"):
        scale_job(job, 1.0)


# ---- measure-more through the service: the worker scales the job and pools -------------------
def test_measure_more_on_an_inconclusive_pr_pools_a_second_run_with_the_first(fake, port, stub,
                                                                             tmp_path):
    from evalbot.evaluation.profile import load_profile
    from evalbot.github.service import make_handlers, make_publisher
    from evalbot.service.worker import Settings, Worker
    from evalbot.store.jobs import Store
    from evalbot.store.noise import NoiseStore
    from tests.github.accounts import BOT, fast_backoff
    from tests.service_env import write_config

    repo, main, shas = stub
    github = f"github:\n  repo: {REPO}\n  api_url: {fake.api_url}\n  bot_login: \"{BOT}\"\n"
    config = write_config(tmp_path, repo, github=github)
    profile = tmp_path / "stub.yaml"  # a 5% noise floor: 5 pairs cannot decide anything
    profile.write_text(profile.read_text().replace("sd_floor: 0.001", "sd_floor: 0.05"))
    store = Store(config.store)
    noise = NoiseStore(config.store)  # the box's calibrated witness floor: both runs take it
    noise.record(config.boxes[0].name, "stub", main, {"witness:decode-128": (0.0123, 9)})
    noise.close()
    handlers = make_handlers(config, store, port, fast_backoff())
    publisher = make_publisher(config, port, fast_backoff())
    worker = Worker("w0", config.boxes[0], load_profile(config.profile), policy(), config.store,
                    tmp_path / "results", Settings(backoff_s=0.0),
                    lambda s, job_id: publish_finished(s, publisher, job_id, Redactor()) and None)
    fake.add_pull(Pull(21, shas["same"], main, MAINTAINER))
    event = parse_event("pull_request", payloads.pull_request(
        "opened", number=21, head_sha=shas["same"], base_sha=main, author=MAINTAINER))
    assert event is not None and handlers.handle(event).startswith("queued job")
    assert worker.step(store)
    [first] = store.history(pr=21)
    assert first["verdict"]["kind"] == "inconclusive"

    line = _comment(handlers, 21, "/evalbot measure-more", MAINTAINER, 31)
    assert line.startswith("measure-more: queued job") and first["job_id"] in line
    assert worker.step(store)
    second = store.history(pr=21)[0]
    pooled = second["results"]
    assert second["job_id"] != first["job_id"] and second["base_sha"] == first["base_sha"]
    assert pooled["pooled_from"] == [first["job_id"], second["job_id"]]
    later_looks = [n - 5 for n in pooled["rule"]["looks"][2:]]
    assert pooled["rule"]["looks"][:2] == [3, 5] and later_looks == [6, 10]  # twice the pairs
    for before, after in zip(first["results"]["cells"], pooled["cells"], strict=True):
        assert len(after["samples"]) == 3 * len(before["samples"])  # 5 pairs + 10 pairs
    # graded on the pooled samples, stored as published (evalbot/report/publication.py)
    assert second["verdict"] == public_verdict(grade(pooled, policy()))
    [comment] = [c for c in fake.comments_on(21) if c["author"] == BOT]
    assert second["job_id"] in comment["body"] and "measure-more ×2" in comment["body"]
    for job_id in (first["job_id"], second["job_id"]):
        [sent] = (tmp_path / "box-0").rglob(f"{job_id}/job.json")
        [witness] = [w for r in json.loads(sent.read_text())["runs"] for w in r["witnesses"]]
        assert (witness["sd_floor_s"], witness["floor_df"]) == (0.0123, 8), job_id
    store.close()
