"""Fixtures shared by several test modules, and the order the suite runs in."""

from pathlib import Path

import pytest

from evalbot.engine.sandbox.sandbox_exec import ALLOWED_USER_FILE
from tests.sshd import sshd

__all__ = ["sshd"]

# The slowest modules, slowest first (`--durations` of the whole suite on a busy 2-core box,
# seconds per module): collected first, pytest-xdist (--dist loadscope --no-loadscope-reorder,
# pyproject.toml) hands them out first, so no long module starts last and keeps one core
# waiting while the others idle. Without --no-loadscope-reorder xdist would hand out the
# modules with the most tests first, and the one-test end-to-end modules last.
# tests/test_demo_e2e.py is four classes, one per demo PR (~50-110 s each), handed out apart.
SLOWEST_FIRST = [
    "test_demo_e2e.py",  # ~360 in all: `evalbot demo --only NAME`, the shipped profile
    "test_confirmation.py",  # ~170: four stub heads with their witnesses
    "test_exhaustion.py",  # ~150 a harness kind: six demo evaluations, two on a small disk
    "test_harness.py",  # ~100
    "test_confirmation_demo.py",  # ~85: the demo engine printing twice its rates
    "test_admission_faults.py", "test_store_full.py",  # 80-100: `evalbot serve` measuring
    "test_publication_faults.py", "test_error_classes.py",  # ~70
    "test_service.py", "test_worker.py", "test_dashboard.py", "test_pipeline_faults.py",  # 60-75
    "test_queue_faults.py", "test_health.py", "test_github_demo_e2e.py",  # 50-55
    "test_publication_canary.py",  # ~60 alone: three demo heads over SSH, then the dashboard
    "test_drain.py", "test_shadow.py", "test_github_cli.py", "test_demo_engine.py",
    "test_speed_harness.py", "test_speed_pooled.py", "test_operations_guide.py",
    "test_setup_guide.py", "test_tokenize.py", "test_redteam.py", "test_demo_over_ssh.py",  # 18-33
]


def pytest_configure(config: pytest.Config) -> None:
    """A machine where `evalbot box init` ran is a box: its launcher accepts only the sandbox
    user named in ALLOWED_USER_FILE, and the suite runs each worker's own sandbox user (the
    sandbox kills every process of its user after a run). Say so once, instead of failing every
    sandboxed test with the launcher's refusal."""
    named = Path(ALLOWED_USER_FILE)
    if named.exists():
        pytest.exit(f"this machine is an evalbot box: {named} names the sandbox user "
                    f"{named.read_text().strip()!r}, and the sandboxed tests run their own users, "
                    "which its launcher refuses. Run the tests on a machine without a box (CI's, "
                    "a container), or undo box init here: docs/box.md, 'Undoing box init'.",
                    returncode=4)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return SLOWEST_FIRST.index(name) if name in SLOWEST_FIRST else len(SLOWEST_FIRST)

    items.sort(key=rank)  # stable: each module keeps its own order
