"""`evalbot rounds` against the fake GitHub over PyGithub: merge-first picks the right PR (same
units only), auto-merge passes the evaluated SHA and fails cleanly when the head moved or branch
protection refuses, stale PRs are closed with a comment, and nothing happens by default."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.errors import ConfigError
from evalbot.config.settings import Config, GitHubConfig, load_config
from evalbot.github.port import GitHubPort
from evalbot.github.rounds import Candidate, Round, pick
from evalbot.store.jobs import Store
from tests.github.accounts import BOT, MAINTAINER
from tests.github.fake_github import REPO, FakeGitHub, Fault, Pull
from tests.verdict_doc import verdict_doc

pytest_plugins = ["tests.github.fixtures"]
MAIN, OLD_MAIN = "a" * 40, "b" * 40


def _sha(n: int) -> str:
    return f"{n:040x}"


def _verdict(base: str, tier: str | None, metric: str = "decode", unit: str = "tok/s",
             speedup: float = 0.2, kind: str = "improved") -> dict[str, Any]:
    cell = {"key": f"m/{metric}@128", "metric": metric, "unit": unit, "speedup": speedup}
    return verdict_doc(f"eval:{tier or 'none'}", kind, base_sha=base, tier=tier,
                       best_cell=cell["key"] if tier else None, cells=[{**cell, "decision": kind}],
                       correctness={"decision": "pass"})


def _record(store: Store, pr: int, head: str, verdict: dict[str, Any], attempt: int = 1) -> None:
    store.enqueue(REPO, pr, head, "p", base_sha=verdict["provenance"]["base_sha"],
                  attempt=attempt)
    job = store.lease("w", 60)
    assert job is not None and store.finish(job.id, "w", verdict, {})


def _round(fake: FakeGitHub, config: Config, port: GitHubPort, store: Store,
           **features: Any) -> list[str]:
    fake.state.branches["main"] = fake.state.branches.get("main", MAIN)
    assert config.github is not None
    gh = dataclasses.replace(config.github, **features)
    return Round(gh, store, port, "p").run()


@pytest.fixture
def store(config: Config) -> Any:
    s = Store(config.store)
    yield s
    s.close()


def test_everything_is_off_by_default(fake: FakeGitHub, config: Config, port: GitHubPort,
                                      store: Store) -> None:
    assert config.github is not None
    gh = config.github
    assert (gh.merge_first, gh.auto_merge, gh.close_stale_after_days) == (False, False, 0)
    fake.add_pull(Pull(1, _sha(1), MAIN, MAINTAINER))
    fake.state.commit_dates[_sha(1)] = "2001-01-01T00:00:00Z"
    _record(store, 1, _sha(1), _verdict(MAIN, "XL"))
    _round(fake, config, port, store)
    assert fake.labels_on(1) == set() and fake.state.pulls[1].state == "open"
    assert fake.state.merges == [] and fake.comments_on(1) == []
    assert store.jobs("queued") == []


CASES = {  # name: ([(pr, base, tier, metric, unit, speedup)], merge-first PR or None)
    "higher tier wins over bigger speedup of another unit": (
        [(1, MAIN, "M", "decode", "tok/s", 0.5), (2, MAIN, "L", "ttft", "ms", 0.1)], 2),
    "same tier, same unit: bigger speedup": (
        [(1, MAIN, "M", "decode", "tok/s", 0.12), (2, MAIN, "M", "decode", "tok/s", 0.15)], 2),
    "same tier, different units: nobody": (
        [(1, MAIN, "M", "decode", "tok/s", 0.12), (2, MAIN, "M", "ttft", "ms", 0.30)], None),
    "measured on an old main does not count": (
        [(1, OLD_MAIN, "XL", "decode", "tok/s", 0.9), (2, MAIN, "S", "decode", "tok/s", 0.05)],
        2),
    "neutral verdicts never win": ([(1, MAIN, None, "decode", "tok/s", 0.0)], None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_merge_first_picks_the_right_pr(name: str, fake: FakeGitHub, config: Config,
                                        port: GitHubPort, store: Store) -> None:
    rows, want = CASES[name]
    fake.add_pull(Pull(9, _sha(9), MAIN, MAINTAINER), labels=["merge-first"])  # a stale holder
    for pr, base, tier, metric, unit, speedup in rows:
        fake.add_pull(Pull(pr, _sha(pr), base, MAINTAINER))
        _record(store, pr, _sha(pr), _verdict(base, tier, metric, unit, speedup,
                                              "improved" if tier else "neutral"))
    _round(fake, config, port, store, merge_first=True)
    holders = [n for n in fake.state.pulls if "merge-first" in fake.labels_on(n)]
    assert holders == ([want] if want else [])
    assert fake.state.merges == []  # auto-merge is off


def test_pick_is_pure_and_never_compares_units() -> None:
    a = Candidate(1, _sha(1), "S", "decode", "tok/s", 0.3, 1)
    b = Candidate(2, _sha(2), "S", "prefill", "tok/s", 0.1, 1)
    assert pick([a, b]) is None and pick([a]) == a and pick([]) is None


def test_auto_merge_confirms_then_merges_the_evaluated_sha(
        fake: FakeGitHub, config: Config, port: GitHubPort, store: Store) -> None:
    fake.add_pull(Pull(4, _sha(4), MAIN, MAINTAINER))
    _record(store, 4, _sha(4), _verdict(MAIN, "L"))
    lines = _round(fake, config, port, store, merge_first=True, auto_merge=True)
    [job] = store.jobs("queued")  # the confirmation run, same head, same main
    assert (job.head_sha, job.base_sha, job.attempt) == (_sha(4), MAIN, 2)
    assert fake.state.merges == [] and "confirmation run queued" in lines[-1]
    leased = store.lease("w", 60)
    assert leased is not None and store.finish(leased.id, "w", _verdict(MAIN, "L"), {})
    lines = _round(fake, config, port, store, merge_first=True, auto_merge=True)
    assert fake.state.merges == [{"number": 4, "sha": _sha(4), "merge_method": "merge"}]
    assert fake.state.pulls[4].state == "closed" and "merged" in lines[-1]


@pytest.mark.parametrize("refusal", ["head moved", "branch protection"])
def test_auto_merge_fails_cleanly(refusal: str, fake: FakeGitHub, config: Config,
                                  port: GitHubPort, store: Store) -> None:
    fake.add_pull(Pull(5, _sha(5), MAIN, MAINTAINER))
    for attempt in (1, 2):
        _record(store, 5, _sha(5), _verdict(MAIN, "M"), attempt)
    if refusal == "head moved":  # pushed after the round read the PR, before the merge call
        port_merge = port.merge

        def moved(number: int, sha: str, method: str) -> str:
            fake.state.pulls[5].head_sha = _sha(55)
            return port_merge(number, sha, method)
        port.merge = moved  # type: ignore[method-assign]
    else:
        fake.state.blocked[5] = "Required status check \"ci\" is expected."
    lines = _round(fake, config, port, store, merge_first=True, auto_merge=True)
    assert fake.state.merges == [{"number": 5, "sha": _sha(5), "merge_method": "merge"}]
    assert fake.state.pulls[5].state == "open" and fake.state.branches["main"] == MAIN
    assert lines[-1].startswith("#5: not merged: GitHub refused (40")


def test_stale_prs_are_closed_with_a_comment(fake: FakeGitHub, config: Config,
                                             port: GitHubPort, store: Store) -> None:
    old = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 40 * 86400))
    fresh = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 86400))
    fake.add_pull(Pull(6, _sha(6), MAIN, MAINTAINER))
    fake.add_pull(Pull(7, _sha(7), MAIN, MAINTAINER))
    fake.state.commit_dates.update({_sha(6): old, _sha(7): fresh})
    lines = _round(fake, config, port, store, close_stale_after_days=30)
    assert fake.state.pulls[6].state == "closed" and fake.state.pulls[7].state == "open"
    [comment] = fake.comments_on(6)
    assert comment["author"] == BOT and "no push for 30 days" in comment["body"]
    assert fake.comments_on(7) == [] and lines == ["#6: closed (no push for 30 days)"]


def test_a_merge_that_answered_502_after_merging_is_reported_merged_once(
        fake: FakeGitHub, config: Config, port: GitHubPort, store: Store) -> None:
    fake.add_pull(Pull(8, _sha(8), MAIN, MAINTAINER))
    for attempt in (1, 2):
        _record(store, 8, _sha(8), _verdict(MAIN, "M"), attempt)
    fake.inject(Fault("pulls/merge", 502, after_commit=True))
    lines = _round(fake, config, port, store, merge_first=True, auto_merge=True)
    assert fake.state.merges == [{"number": 8, "sha": _sha(8), "merge_method": "merge"}]
    merged = fake.state.pulls[8].merged_sha
    assert merged is not None and fake.state.branches["main"] == merged
    assert lines[-1] == f"#8: merged {_sha(8)[:10]} as {merged[:10]}"
    lines = _round(fake, config, port, store, merge_first=True, auto_merge=True)  # next round
    assert len(fake.state.merges) == 1 and not any("merged" in line for line in lines)


def test_a_merge_that_answered_502_without_merging_is_reported_not_merged(
        fake: FakeGitHub, config: Config, port: GitHubPort, store: Store) -> None:
    fake.add_pull(Pull(9, _sha(9), MAIN, MAINTAINER))
    for attempt in (1, 2):
        _record(store, 9, _sha(9), _verdict(MAIN, "M"), attempt)
    fake.inject(Fault("pulls/merge", 502))
    lines = _round(fake, config, port, store, merge_first=True, auto_merge=True)
    assert fake.state.pulls[9].state == "open" and fake.state.pulls[9].merged_sha is None
    assert lines[-1].startswith("#9: not merged: GitHub error 502")


def test_a_stale_pr_whose_closing_fails_gets_one_comment(
        fake: FakeGitHub, config: Config, port: GitHubPort, store: Store) -> None:
    old = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 40 * 86400))
    fake.add_pull(Pull(10, _sha(10), MAIN, MAINTAINER))
    fake.add_pull(Pull(11, _sha(11), MAIN, MAINTAINER))
    fake.state.commit_dates.update({_sha(10): old, _sha(11): old})
    fake.inject(Fault("pulls/update", 502, times=3, where="/pulls/10"))
    for _ in range(3):  # three rounds (cron), each failing to close #10
        lines = _round(fake, config, port, store, close_stale_after_days=30)
        assert lines[0].startswith("#10: not closed: GitHub error 502")
    assert fake.state.pulls[11].state == "closed"  # #10's fault did not stop #11
    assert _round(fake, config, port, store, close_stale_after_days=30) == \
        ["#10: closed (no push for 30 days)"]
    assert fake.state.pulls[10].state == "closed"
    assert [c["author"] for c in fake.comments_on(10)] == [BOT]
    assert [c["author"] for c in fake.comments_on(11)] == [BOT]


def test_config_names_bad_round_keys(tmp_path: Path) -> None:
    base = f"profile: demo\nboxes: [{{name: b, kind: local, workdir: {tmp_path}}}]\n"
    for bad, words in (("auto_merge: true", "needs merge_first"),
                       ("merge_method: fast", "merge, squash or rebase"),
                       ("close_stale_after_days: -1", "whole days")):
        path = tmp_path / "c.yaml"
        path.write_text(base + f"github:\n  repo: {REPO}\n  {bad}\n")
        with pytest.raises(ConfigError, match=words):
            load_config(path)
    assert GitHubConfig(repo=REPO).merge_first is False
