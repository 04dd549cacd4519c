"""Publishing through unmodified PyGithub to the fake GitHub, under faults; final state asserted."""

from __future__ import annotations

import pytest

from evalbot.config.settings import REPO_ROOT
from evalbot.github.labels_sync import LabelFamily
from evalbot.github.port import GitHubPort
from evalbot.github.publish import Backoff, Publisher
from evalbot.github.texts import pending_comment
from evalbot.grading.policy import load_labels
from tests.github.accounts import BOT, OUTSIDER
from tests.github.fake_github import FakeGitHub, Fault

SHA = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
SECONDARY = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."

pytest_plugins = ["tests.github.fixtures"]


@pytest.fixture
def publisher(port: GitHubPort) -> Publisher:
    return Publisher(port, BOT, LabelFamily(load_labels(REPO_ROOT / "labels.yaml")),
                     backoff=Backoff(transient_wait_s=0.05))


def body(note: str) -> str:
    return pending_comment(SHA, "queued", note, "evalbot")


def bot_comments(fake: FakeGitHub, number: int) -> list[str]:
    return [c["body"] for c in fake.comments_on(number) if c["author"] == BOT]


def test_one_comment_updated_in_place(fake: FakeGitHub, publisher: Publisher) -> None:
    publisher.publish(2, SHA, body("first"), ["eval:pending"], "pending", "queued")
    publisher.publish(2, SHA, body("second"), ["eval:M"], "success", "eval:M")
    publisher.publish(2, SHA, body("second"), ["eval:M"], "success", "eval:M")  # a retry
    assert bot_comments(fake, 2) == [body("second")]
    assert fake.calls("issues/create-comment") == 1
    assert fake.calls("issues/update-comment") == 1  # an unchanged body is not re-sent
    assert fake.labels_on(2) == {"eval:M"}
    assert [s["state"] for s in fake.state.statuses[SHA]] == ["pending", "success", "success"]


def test_forged_marker_by_another_user_changes_nothing(fake: FakeGitHub,
                                                       publisher: Publisher) -> None:
    forged = body("I am evalbot, trust me: eval:XL")
    fake.state.comments[1] = {"issue": 2, "author": OUTSIDER, "body": forged}
    publisher.sticky(2, body("real"))
    assert fake.state.comments[1]["body"] == forged  # never edited (the fake would flag it)
    assert bot_comments(fake, 2) == [body("real")]


def test_502_after_github_created_the_comment_leaves_one(fake: FakeGitHub,
                                                        publisher: Publisher) -> None:
    fake.inject(Fault("issues/create-comment", 502, after_commit=True))
    publisher.sticky(2, body("x"))
    assert bot_comments(fake, 2) == [body("x")]
    assert fake.calls("issues/create-comment") == 1


def test_502_before_anything_was_stored_retries(fake: FakeGitHub,
                                               publisher: Publisher) -> None:
    fake.inject(Fault("issues/create-comment", 502))
    publisher.sticky(2, body("x"))
    assert bot_comments(fake, 2) == [body("x")]
    assert fake.calls("issues/create-comment") == 2


def test_duplicates_from_an_old_race_are_healed(fake: FakeGitHub,
                                               publisher: Publisher) -> None:
    for cid in (7, 8, 9):
        fake.state.comments[cid] = {"issue": 2, "author": BOT, "body": body(f"old {cid}")}
    publisher.sticky(2, body("new"))
    assert [(cid, c["body"]) for cid, c in fake.state.comments.items()] == [(7, body("new"))]


def test_secondary_rate_limit_403_honours_retry_after(fake: FakeGitHub,
                                                     publisher: Publisher) -> None:
    fake.inject(Fault("issues/create-comment", 403, headers={"Retry-After": "1"},
                      message=SECONDARY))
    publisher.sticky(2, body("x"))
    assert publisher.backoff.waits == [1.0]
    assert bot_comments(fake, 2) == [body("x")]


def test_429_honours_retry_after_on_labels_and_status(fake: FakeGitHub,
                                                     publisher: Publisher) -> None:
    fake.inject(Fault("issues/add-labels", 429, headers={"Retry-After": "1"},
                      message="API rate limit exceeded"))
    fake.inject(Fault("repos/create-commit-status", 403, headers={"Retry-After": "1"},
                      message=SECONDARY, after_commit=False))
    publisher.publish(2, SHA, body("x"), ["eval:S"], "success", "eval:S")
    assert publisher.backoff.waits == [1.0, 1.0]
    assert fake.labels_on(2) == {"eval:S"}
    assert [s["state"] for s in fake.state.statuses[SHA]] == ["success"]


def test_rate_limit_longer_than_the_cap_is_raised(fake: FakeGitHub,
                                                 publisher: Publisher) -> None:
    from evalbot.github.port import RateLimited

    fake.inject(Fault("repos/create-commit-status", 403, message=SECONDARY))  # no Retry-After
    publisher.backoff.max_wait_s = 5.0  # GitHub's default 60 s advice exceeds it
    with pytest.raises(RateLimited):
        publisher.status(SHA, "pending", "queued")
    assert SHA not in fake.state.statuses


def test_stale_evalbot_labels_replaced_others_kept(fake: FakeGitHub,
                                                  publisher: Publisher) -> None:
    for name in ("eval:S", "eval-demo:S", "4k-context", "regression-32k", "bug",
                 "evalbot-approved"):
        fake.state.repo_labels[name] = {"color": "ededed", "description": ""}
    fake.state.issue_labels[2] = ["eval:S", "eval-demo:S", "4k-context", "regression-32k", "bug",
                                  "evalbot-approved"]
    publisher.labels(2, ["eval:M", "eval-demo:M", "32k-context"])
    assert fake.labels_on(2) == {"bug", "evalbot-approved", "eval:M", "eval-demo:M",
                                 "32k-context"}
    assert fake.state.repo_labels["eval:M"]["color"] == "5319e7"  # styled from labels.yaml
    assert fake.state.repo_labels["32k-context"]["color"] == "d4c5f9"
    publisher.labels(2, ["eval:M", "eval-demo:M", "32k-context"])  # idempotent
    assert fake.calls("issues/add-labels") == 1 and fake.calls("issues/remove-label") == 4


def test_verdict_status_links_to_the_run(fake: FakeGitHub, port: GitHubPort) -> None:
    """With service.reports_url the commit status points at the run's published artifacts
    (through PyGithub, checked against GitHub's OpenAPI description); without it, no link."""
    from tests.comment_fixtures import gpu_verdicts

    verdict = {**gpu_verdicts()["slow"], "provenance": {**gpu_verdicts()["slow"]["provenance"],
                                                        "head_sha": SHA}}
    family = LabelFamily(load_labels(REPO_ROOT / "labels.yaml"))
    Publisher(port, BOT, family, reports_url="https://reports.example/evalbot/").publish_verdict(
        2, verdict, body("verdict"))
    Publisher(port, BOT, family).publish_verdict(2, verdict, body("verdict"))
    assert [s["target_url"] for s in fake.state.statuses[SHA]] == [
        "https://reports.example/evalbot/runs/gpu-e2e/", ""]
    assert fake.state.statuses[SHA][0]["state"] == "failure"
