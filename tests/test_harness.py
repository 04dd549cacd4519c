"""The harness end to end on a stub engine: results contract, decisions, failure attribution.
A liar contradicted by the harness's witness: tests/test_confirmation.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from evalbot.engine.contract.job import parse_job
from evalbot.engine.contract.results import TIMING_STAGES, validate
from evalbot.engine.harness.steps import run_job
from tests.stub_engine import job_doc, make_repo

VARIANTS = {
    "faster": {"decode": 1300.0, "prefill": 1.3e6},
    "same": {},
    "build_fails": {"build_fails": True},
    "crash": {"crash": True},
    "hang": {"hang": True},
}


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, str]]:
    return make_repo(tmp_path_factory.mktemp("stub"), VARIANTS)


@pytest.fixture(scope="module")
def ran(stub: tuple[Path, str, dict[str, str]],
        tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[dict, Path]]:
    """Each head's evaluation with the default job, run once for all the tests that check a
    fact of it (results and job folder; read only): one stub evaluation is several seconds."""
    done: dict[str, tuple[dict, Path]] = {}

    def get(head: str) -> tuple[dict, Path]:
        if head not in done:
            job = tmp_path_factory.mktemp(f"job-{head}")
            done[head] = (_run(stub, job, head), job)
        return done[head]

    return get


def _run(stub: tuple[Path, str, dict[str, str]], tmp_path: Path, head: str,
         base: str | None = None, **kw: object) -> dict:
    repo, main, shas = stub
    doc = job_doc(repo, base or main, shas.get(head, head), **kw)  # type: ignore[arg-type]
    results = run_job(parse_job(doc), tmp_path)
    assert json.loads((tmp_path / "results.json").read_text()) == results
    return validate(results)


def test_faster_head_is_measured_in_pairs_and_decided(ran):
    results, job = ran("faster")
    assert results["failures"] == []
    for cell in results["cells"]:
        sides = [s["side"] for s in cell["samples"]]
        assert sides[:4] == ["base", "head", "head", "base"]  # alternating order, ABBA
        assert cell["looks"][-1]["decision"] == "improved"
        assert 0.25 < cell["looks"][-1]["estimate"] < 0.35
    assert json.loads((job / "status.json").read_text())["step"] == "done"


def test_artifacts_are_hashed_and_build_facts_recorded(stub, tmp_path):
    results = _run(stub, tmp_path, "same")
    assert set(results["head"]["artifacts"]) == {"build/engine.py", "build/speed.json"}
    assert results["base"]["ok"] and results["head"]["ok"]


@pytest.mark.parametrize(
    ("head", "stage", "kind"),
    [("build_fails", "build", "build-failed"), ("crash", "speed", "crashed")],
)
def test_head_failures_are_the_prs(ran, head, stage, kind):
    failure = ran(head)[0]["failures"][0]
    assert (failure["stage"], failure["side"], failure["attribution"], failure["kind"]) == \
        (stage, "head", "pr", kind)


def test_head_timeout_is_the_prs(stub, tmp_path):
    failure = _run(stub, tmp_path, "hang", timeout_s=2.0)["failures"][0]
    assert (failure["attribution"], failure["kind"]) == ("pr", "timeout")


def test_base_failure_is_infra_even_when_head_fails_too(stub, tmp_path):
    _, _, shas = stub
    failure = _run(stub, tmp_path, "crash", base=shas["build_fails"])["failures"][0]
    assert (failure["side"], failure["attribution"], failure["kind"]) == \
        ("base", "infra", "infra-error")


def test_unknown_commit_is_an_infra_checkout_failure(stub, tmp_path):
    failure = _run(stub, tmp_path, "f" * 40)["failures"][0]
    assert (failure["stage"], failure["attribution"]) == ("checkout", "infra")


def test_build_cache_reuses_a_verified_build(stub, tmp_path):
    repo, main, shas = stub
    doc = job_doc(repo, main, shas["same"])
    doc["cache_dir"] = str(tmp_path / "cache")
    first = run_job(parse_job(doc), tmp_path / "one")
    second = run_job(parse_job(doc), tmp_path / "two")
    assert not first["base"]["cached"] and second["base"]["cached"]
    assert first["base"]["artifacts"] == second["base"]["artifacts"]
    # A tampered cache entry is not reused.
    for f in (tmp_path / "cache" / "builds").rglob("engine.py"):
        f.write_text("print('tampered')")
    third = run_job(parse_job(doc), tmp_path / "three")
    assert not third["base"]["cached"]


def stages_adding_up(results: dict) -> dict[str, float]:
    """Every stage's box seconds, checked to add up to the total (within 1 s)."""
    timing = results["timing"]
    assert list(timing["stages"]) == list(TIMING_STAGES)
    assert abs(sum(timing["stages"].values()) - timing["total_s"]) <= 1.0
    return timing["stages"]


def test_each_stage_of_an_evaluation_records_its_box_time(ran):
    stages = stages_adding_up(ran("faster")[0])
    # the faster head's decode@128 is confirmed by the job's witness; the stub's job scores nothing
    ran = {name for name, seconds in stages.items() if seconds > 0}
    assert {"builds", "warmups", "measuring", "witnesses"} <= ran
    assert not ran & {"correctness_reference", "correctness_base", "correctness_head"}


@pytest.mark.parametrize(("head", "stages_ran"), [("build_fails", {"builds"}),
                                           ("crash", {"builds", "warmups"})])
def test_a_failed_evaluation_records_the_stages_that_ran(ran, head, stages_ran):
    stages = stages_adding_up(ran(head)[0])
    assert stages_ran <= {name for name, seconds in stages.items() if seconds > 0}
    # the head crashes in its warm-up: no pair was timed, no witness or score run started
    assert stages["witnesses"] == stages["correctness_base"] == 0


def test_a_harness_failure_still_records_the_stages(stub, tmp_path):
    repo, main, shas = stub
    doc = job_doc(repo, main, shas["same"])
    (tmp_path / "cache").write_text("a file where the build cache's folder must be")
    doc["cache_dir"] = str(tmp_path / "cache")
    results = validate(run_job(parse_job(doc), tmp_path / "job"))
    assert results["failures"][0]["message"] == "the harness failed"
    assert stages_adding_up(results)["builds"] > 0  # it failed storing the first build
