"""`evalbot labels sync` is a pure diff from labels.yaml, then apply; evalbot's label family."""

from __future__ import annotations

import pytest

from evalbot.config.settings import REPO_ROOT
from evalbot.github.labels_sync import Change, LabelFamily, apply, desired_labels, diff
from evalbot.github.port import GitHubPort, LabelInfo
from evalbot.grading.policy import load_labels
from tests.github.fake_github import FakeGitHub

BOOK = load_labels(REPO_ROOT / "labels.yaml")
M = LabelInfo("eval:M", "5319e7", "evalbot: medium speedup")

DIFF_CASES = [
    ([M], [], [Change("create", M, "missing")]),
    ([M], [M], []),
    ([M], [LabelInfo("eval:M", "5319E7", "evalbot: medium speedup")], []),  # colour case
    ([M], [LabelInfo("eval:M", "000000", "evalbot: medium speedup")],
     [Change("update", M, "color '000000' -> '5319e7'")]),
    ([M], [LabelInfo("eval:M", "5319e7", "old")],
     [Change("update", M, "description 'old' -> 'evalbot: medium speedup'")]),
    ([M], [LabelInfo("EVAL:m", "5319e7", "evalbot: medium speedup")],  # names ignore case
     [Change("update", LabelInfo("EVAL:m", "5319e7", "evalbot: medium speedup"),
             "name 'EVAL:m' -> 'eval:M'")]),
    ([], [LabelInfo("bug", "d73a4a", "")], []),  # never touches labels it does not own
]

pytest_plugins = ["tests.github.fixtures"]


@pytest.mark.parametrize(("desired", "current", "expected"), DIFF_CASES)
def test_diff_table(desired: list[LabelInfo], current: list[LabelInfo],
                    expected: list[Change]) -> None:
    assert diff(desired, current) == expected


def test_desired_comes_from_labels_yaml() -> None:
    names = [lb.name for lb in desired_labels(BOOK)]
    assert names == [lb.name for lb in BOOK.labels] and "eval:pending" in names
    assert all(len(lb.color) == 6 for lb in desired_labels(BOOK))


@pytest.mark.parametrize(("name", "owned"), [
    ("eval:M", True), ("eval:pending", True), ("eval-demo:S", True), ("eval-qwen35:REJECT", True),
    ("4k-context", True), ("regression-32k-pp", True), ("bug", False),
    ("evalbot-approved", False), ("team:backend", False),
])
def test_family_recognises_its_labels(name: str, owned: bool) -> None:
    assert LabelFamily(BOOK).owns(name) is owned


def test_sync_applies_then_converges(fake: FakeGitHub, port: GitHubPort) -> None:
    fake.state.repo_labels["eval:M"] = {"color": "000000", "description": "stale"}
    fake.state.repo_labels["bug"] = {"color": "d73a4a", "description": "Something is wrong"}
    changes = diff(desired_labels(BOOK), port.repo_labels())
    assert len(changes) == len(BOOK.labels)  # every label created or restyled
    apply(port, changes)
    assert diff(desired_labels(BOOK), port.repo_labels()) == []
    assert fake.state.repo_labels["eval:M"] == {"color": "5319e7",
                                                "description": "evalbot: medium speedup"}
    assert fake.state.repo_labels["bug"]["description"] == "Something is wrong"
