"""Fixtures shared by several test modules, and the order the suite runs in."""

import pytest

from tests.sshd import sshd

__all__ = ["sshd"]

# The end-to-end modules, slowest first: collected first, pytest-xdist (--dist loadfile) hands
# them out first, so the longest module never starts last and keeps one core waiting.
SLOWEST_FIRST = ["test_demo_e2e.py", "test_github_demo_e2e.py", "test_demo_over_ssh.py",
                 "test_confirmation.py"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return SLOWEST_FIRST.index(name) if name in SLOWEST_FIRST else len(SLOWEST_FIRST)

    items.sort(key=rank)  # stable: each module keeps its own order
