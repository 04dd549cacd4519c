"""Fixtures shared by several test modules, and the order the suite runs in."""

from pathlib import Path

import pytest

from evalbot.engine.sandbox.sandbox_exec import ALLOWED_USER_FILE
from tests.sshd import sshd

__all__ = ["sshd"]

# Seconds per pytest-xdist work unit (a module, a test class, or one test of OWN_SCOPE_MODULES),
# from a per-test timeline of the whole suite (`--durations`, and each test's wall and CPU) on a
# busy 2-core machine (load about 10: another process's four busy loops and its demo runs beside
# the suite's workers, three then; the figures are inflated, only their order matters). The units are
# handed out longest first (tests/conftest.py's collection order, kept by --no-loadscope-reorder
# in pyproject.toml), so no long unit starts late and keeps one worker busy while the others
# idle: when these were in alphabetical order, test_warm_reference.py (190 s) started at 775 s of
# a 1000 s run. Every unit of 10 s or more is named (test_fault_screen.py, 73 s, once was not);
# the others come after, in collection order. A unit that grows past its neighbours belongs
# here: the suite then ends with its workers together.
SCOPE_SECONDS = {
    "test_hidden_slowdown_demo.py::"
    "test_a_prefill_slowed_twofold_behind_printed_rates_is_not_unchanged": 191,
    "test_demo_e2e.py::TestNeutralPR": 179, "test_demo_e2e.py::TestFasterPR": 164,
    "test_exhaustion.py": 160, "test_warm_reference.py": 150, "test_setup_guide.py": 136,
    "test_worker.py": 128, "test_witness_box_time.py": 104, "test_confirmation.py": 94,
    "test_dashboard.py": 87, "test_queue_faults.py": 87, "test_fault_screen.py": 73,
    "test_doctor_deploy.py": 72, "test_witness_attacks.py": 72, "test_redteam.py": 71,
    "test_hidden_slowdown_demo.py::"
    "test_the_same_prefill_printed_honestly_is_the_regression_it_is": 70,
    "test_workflow_push.py": 68, "test_sparkinfer_witness.py": 64, "test_speed_harness.py": 64,
    "test_witness_knows_itself.py": 59, "test_sparkinfer_score.py": 58,
    "test_pipeline_faults.py": 58, "test_gpu_runner.py": 58, "test_drain.py": 56,
    "test_witness_floor_stale.py": 56, "test_witness_near_ties.py": 55,
    "test_reference_cache.py": 55, "test_store_full.py": 54, "test_publication_canary.py": 53,
    "test_demo_engine.py": 51, "test_health.py": 48, "test_service.py": 47,
    "test_demo_e2e.py::TestBrokenPR": 47, "test_publication_faults.py": 46,
    "test_demo_e2e.py::TestSlowLongPR": 46, "test_error_classes.py": 46,
    "test_stats_stress.py": 43, "test_sandbox_reads.py": 42, "test_service_hosts.py": 42,
    "test_hidden_h100_noise.py": 42,
    "test_admission_faults.py": 40, "test_github_cli.py": 38, "test_comment_screenshots.py": 38,
    "test_github_reconcile.py": 35, "test_shadow.py": 34, "test_speed_pooled.py": 33,
    "test_overrides.py": 33, "test_sandbox_secrets.py": 33, "test_witness_quality_bench.py": 33,
    "test_main_scores.py": 30, "test_confirmation_demo.py": 30, "test_ssh_box.py": 29,
    "test_correctness.py": 28, "test_github_demo_e2e.py": 28, "test_doctor.py": 25,
    "test_tokenize.py": 25, "test_harness.py": 25, "test_witness_pooled.py": 23,
    "test_demo_over_ssh.py": 23, "test_stats.py": 23, "test_bench_box_time.py": 22,
    "test_comment_glyphs.py": 22, "test_main_drift.py": 22, "test_llamacpp_noise.py": 22,
    "test_run_page.py": 20, "test_wheel.py": 20, "test_warm_reference_sandbox.py": 19,
    "test_service_publishing.py": 18, "test_store_leases.py": 18, "test_correctness_deep.py": 18,
    "test_github_isolation.py": 17, "test_witness_stops.py": 16, "test_witness_unverified.py": 16,
    "test_calibrate_ssh.py": 15, "test_score_dump.py": 15, "test_budget_pace.py": 15,
    "test_operations_guide.py": 14, "test_sandbox.py": 14,
    "test_github_e2e.py": 13, "test_github_permissions.py": 12, "test_github_flow.py": 12,
    "test_github_webhook.py": 12, "test_migrations.py": 12, "test_correctness_guards.py": 11,
    "test_github_publish.py": 11, "test_bench_paces.py": 11, "test_github_hostile.py": 11,
    "test_cli_wheel_user.py": 11, "test_github_rounds.py": 11, "test_demo_profile.py": 11,
    "test_guard_quality.py": 10,
}
# test_bench_short.py's benches, each a work unit of its own (OWN_SCOPE_MODULES)
BENCH_SHORT_SECONDS = {"intake.py": 41, "publication_restart.py": 31, "fault_quality.py": 31,
                       "hidden_cost.py": 14, "calibration_limits.py": 13, "slow_clients.py": 13}
SCOPE_SECONDS.update({f"test_bench_short.py::test_the_bench_runs_in_its_short_form[{bench}]": s
                      for bench, s in BENCH_SHORT_SECONDS.items()})

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
