"""Fixtures shared by several test modules, and the order the suite runs in."""

from pathlib import Path

import pytest

from evalbot.engine.sandbox.sandbox_exec import ALLOWED_USER_FILE
from tests.sshd import sshd

__all__ = ["sshd"]

# Seconds per pytest-xdist work unit (a module, a test class, or one test of OWN_SCOPE_MODULES),
# from `--durations` and a per-test timeline of the whole suite on a busy 2-core machine (load
# 4-9: the figures are inflated; only their order matters). The units are handed out longest
# first (tests/conftest.py's collection order, kept by --no-loadscope-reorder in pyproject.toml),
# so no long unit starts late and keeps one worker busy while the others idle: when these were
# in alphabetical order, test_warm_reference.py (190 s) started at 775 s of a 1000 s run. Units
# not named take under 10 s and come after, in collection order. A unit that grows past its
# neighbours belongs here: the suite then ends with its workers together.
SCOPE_SECONDS = {
    "test_setup_guide.py": 90,  # docs/setup.md: a wheel, box init, calibrate and a verdict over SSH
    "test_warm_reference.py": 150, "test_exhaustion.py": 110,
    "test_hidden_slowdown_demo.py::"
    "test_a_prefill_slowed_twofold_behind_printed_rates_is_not_unchanged": 85,
    "test_hidden_slowdown_demo.py::"
    "test_the_same_prefill_printed_honestly_is_the_regression_it_is": 45,
    "test_witness_box_time.py": 130, "test_demo_e2e.py::TestSlowLongPR": 115,
    "test_confirmation.py": 105, "test_demo_e2e.py::TestNeutralPR": 105,
    "test_witness_floor_stale.py": 100, "test_doctor_deploy.py": 95,
    "test_demo_e2e.py::TestFasterPR": 90, "test_redteam.py": 85, "test_worker.py": 85,
    "test_sparkinfer_score.py": 80, "test_workflow_push.py": 75, "test_queue_faults.py": 75,
    "test_dashboard.py": 65, "test_witness_attacks.py": 70, "test_sparkinfer_witness.py": 70,
    "test_witness_near_ties.py": 65, "test_store_full.py": 40,
    "test_sandbox_secrets.py": 60, "test_publication_faults.py": 58,
    "test_demo_e2e.py::TestBrokenPR": 58, "test_pipeline_faults.py": 55,
    "test_admission_faults.py": 35, "test_service.py": 53, "test_publication_canary.py": 52,
    "test_github_reconcile.py": 51, "test_error_classes.py": 50, "test_gpu_runner.py": 49,
    "test_health.py": 48, "test_service_hosts.py": 45, "test_drain.py": 41,
    "test_sandbox_reads.py": 40, "test_github_cli.py": 35,
    "test_speed_harness.py": 39, "test_demo_over_ssh.py": 38, "test_shadow.py": 37,
    "test_confirmation_demo.py": 37, "test_overrides.py": 35, "test_github_demo_e2e.py": 34,
    "test_reference_cache.py": 33, "test_stats_stress.py": 33,
    "test_bench_short.py::test_the_bench_runs_in_its_short_form[intake.py]": 45,
    "test_bench_short.py::test_the_bench_runs_in_its_short_form[publication_restart.py]": 30,
    "test_bench_short.py::test_the_bench_runs_in_its_short_form[fault_quality.py]": 20,
    "test_bench_short.py::test_the_bench_runs_in_its_short_form[hidden_cost.py]": 20,
    "test_bench_short.py::test_the_bench_runs_in_its_short_form[slow_clients.py]": 20,
    "test_wheel.py": 25, "test_warm_reference_sandbox.py": 25, "test_witness_knows_itself.py": 24,
    "test_tokenize.py": 23, "test_ssh_box.py": 23, "test_comment_screenshots.py": 23,
    "test_harness.py": 20, "test_bench_box_time.py": 19, "test_service_publishing.py": 19,
    "test_store_leases.py": 18, "test_correctness.py": 18, "test_speed_pooled.py": 18,
    "test_main_scores.py": 16, "test_witness_unverified.py": 16, "test_score_dump.py": 14,
    "test_sandbox.py": 14, "test_stats.py": 14, "test_github_isolation.py": 14,
    "test_github_hostile.py": 14, "test_operations_guide.py": 14, "test_github_e2e.py": 13,
    "test_run_page.py": 13, "test_github_flow.py": 12, "test_bench_paces.py": 12,
    "test_doctor.py": 11, "test_witness_pooled.py": 11, "test_comment_glyphs.py": 11,
    "test_calibrate_ssh.py": 11, "test_demo_profile.py": 11, "test_github_rounds.py": 11,
}

# Modules of independent tests (each runs its own subprocess, they share no costly module
# fixture), some much longer than the rest: each test is a work unit of its own, so they run on
# several workers side by side instead of one after the other on one.
OWN_SCOPE_MODULES = {"test_bench_short.py", "test_hidden_slowdown_demo.py"}


def work_unit(nodeid: str) -> str:
    """The xdist work unit of a test: loadscope's (its class, else its module), or the test
    itself in OWN_SCOPE_MODULES."""
    if nodeid.split("::", 1)[0].rsplit("/", 1)[-1] in OWN_SCOPE_MODULES:
        return nodeid
    return nodeid.rsplit("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """loadscope, with OWN_SCOPE_MODULES split into their tests (pyproject.toml's --dist)."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return UnitScheduling(config, log)


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
    def seconds(item: pytest.Item) -> float:
        unit = work_unit(item.nodeid)
        return SCOPE_SECONDS.get(unit.removeprefix("tests/"), 0.0)

    items.sort(key=seconds, reverse=True)  # stable: each unit keeps its own order
