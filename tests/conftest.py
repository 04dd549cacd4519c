"""Fixtures shared by several test modules, and the order the suite runs in."""

import pytest

from tests.sshd import sshd

__all__ = ["sshd"]

# The slowest modules, slowest first (`--durations` on a busy 2-core box, seconds per module):
# collected first, pytest-xdist (--dist loadfile --no-loadscope-reorder, pyproject.toml) hands
# them out first, so no long module starts last and keeps one core waiting while the other
# idles. Without --no-loadscope-reorder xdist would hand out the modules with the most tests
# first, and the one-test end-to-end modules last.
SLOWEST_FIRST = [
    "test_demo_e2e.py",  # ~600: `evalbot demo`, the shipped profile's four evaluations
    "test_confirmation.py",  # ~300: the demo liar and four stub heads with their witnesses
    "test_github_demo_e2e.py",  # ~150
    "test_redteam.py",  # ~140
    "test_pipeline_faults.py",  # ~110
    "test_correctness.py",  # ~90
    "test_queue_faults.py", "test_worker.py", "test_service.py", "test_github_cli.py",  # 60-75
    "test_demo_over_ssh.py", "test_dashboard.py", "test_calibrate_ssh.py", "test_drain.py",
    "test_harness.py", "test_health.py", "test_demo_engine.py",  # 35-60
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return SLOWEST_FIRST.index(name) if name in SLOWEST_FIRST else len(SLOWEST_FIRST)

    items.sort(key=rank)  # stable: each module keeps its own order
