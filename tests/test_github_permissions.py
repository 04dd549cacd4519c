"""Write access as GitHub has it now decides every command that changes state (issue 47).

A maintainer whose write access was revoked a minute ago must not cancel, hold, waive or rerun
on the strength of an answer cached before; a flood of commands still costs one permission
look-up per user. Signed deliveries over real HTTP, unmodified PyGithub to the fake GitHub.
"""

from __future__ import annotations

import pytest

from evalbot.github.service import Running
from evalbot.store.jobs import Store
from evalbot.store.overrides import Overrides
from tests.github import payloads
from tests.github.accounts import MAINTAINER
from tests.github.fake_github import REPO, FakeGitHub, Pull
from tests.github.sender import Sender, settle

A = "a" * 40
FORMER = "Octocat"  # a maintainer until the test revokes it
PERMISSION = "repos/get-collaborator-permission-level"

pytest_plugins = ["tests.github.fixtures"]


def _say(send: Sender, text: str, comment_id: int, who: str = FORMER) -> None:
    send.post("issue_comment", payloads.pr_comment(number=8, body=text, author=who,
                                                   pr_author=MAINTAINER, comment_id=comment_id))


@pytest.mark.parametrize("command", ["/evalbot cancel", "/evalbot hold", "/evalbot rerun",
                                     "/evalbot waive flaky box", "/evalbot unhold",
                                     "/evalbot measure-more"])
def test_revoked_write_access_commands_nothing_at_once(
        bot: tuple[Running, Sender, Store], fake: FakeGitHub, command: str) -> None:
    running, send, store = bot
    fake.add_pull(Pull(8, A, "b" * 40, MAINTAINER))
    fake.add_user(FORMER, "write")
    send.post("pull_request", payloads.pull_request("opened", number=8, head_sha=A,
                                                    author=MAINTAINER))
    _say(send, "/evalbot help", 1)  # answered: FORMER's write access is now known (and cached)
    settle(running, 2)
    [job] = store.jobs()
    fake.add_user(FORMER, "read")  # revoked on GitHub
    looked_up = fake.calls(PERMISSION)
    _say(send, command, 2)
    lines = settle(running, 3)
    assert lines[-1].endswith(f"refused {FORMER}"), lines[-1]
    assert fake.calls(PERMISSION) == looked_up + 1  # asked GitHub, not the cache
    assert [(j.id, j.state) for j in store.jobs()] == [(job.id, "queued")]
    assert Overrides(store.path).trail(REPO, 8) == []  # no hold, waiver or measure-more
    assert [s["state"] for s in fake.state.statuses[A]] == ["pending"]
    refusal = [c["body"] for c in fake.comments_on(8) if "sorry" in c["body"]]
    assert len(refusal) == 1 and "write access" in refusal[0]


def test_a_flood_of_commands_still_costs_one_look_up_per_user(
        bot: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    running, send, store = bot
    fake.add_pull(Pull(8, A, "b" * 40, MAINTAINER))
    fake.add_user(FORMER, "read")
    for i in range(20):  # someone without write access: one look-up, one refusal an hour
        _say(send, "/evalbot cancel" if i % 2 else "/evalbot hold", 100 + i)
    settle(running, 20)
    assert fake.calls(PERMISSION) == 1
    assert len(fake.comments_on(8)) == 1 and store.jobs() == []
    # A maintainer's state-changing commands each ask GitHub: access is current for them.
    for i in range(3):
        _say(send, "/evalbot rerun", 200 + i, who=MAINTAINER)
    settle(running, 23)
    assert fake.calls(PERMISSION) == 1 + 3  # a maintainer's rerun skips the admission check
    assert [(j.head_sha, j.state) for j in store.jobs()] == [(A, "queued")]


def test_an_approval_label_from_revoked_write_access_is_taken_off(
        bot: tuple[Running, Sender, Store], fake: FakeGitHub) -> None:
    from tests.github.accounts import OUTSIDER

    running, send, store = bot
    fake.add_pull(Pull(8, A, "b" * 40, OUTSIDER, fork=True), ["evalbot-approved"])
    fake.add_user(FORMER, "write")
    _say(send, "/evalbot help", 1)
    settle(running, 1)
    fake.add_user(FORMER, "read")
    send.post("pull_request", payloads.pull_request(
        "labeled", number=8, head_sha=A, author=OUTSIDER, sender=FORMER, fork=True,
        labels=("evalbot-approved",), label="evalbot-approved"))
    lines = settle(running, 2)
    assert "approval refused" in lines[-1]
    assert store.jobs() == [] and fake.labels_on(8) == set()
