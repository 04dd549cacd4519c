"""Each model of a profile guards the other's correctness (profile `correctness.guards`): the job
carries the guard models, the results hold one section per guard, and a guard's reject rejects."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalbot.config.errors import ConfigError
from evalbot.config.settings import REPO_ROOT, BoxConfig
from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.job import parse_job
from evalbot.engine.contract.results import validate
from evalbot.engine.measure.gpu import device_identity
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import load_profile
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.report.render import render_comment
from tests.test_correctness_policy import chunks, section

POLICY = load_labels(REPO_ROOT / "labels.yaml").policy("default")
PROFILES = REPO_ROOT / "evalbot" / "profiles"


def results(main: dict[str, Any], guards: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schema": "evalbot.results/1", "job_id": "j", "profile": "sparkinfer", "box": {},
            "base": {"sha": "a" * 40, "ok": True}, "head": {"sha": "b" * 40, "ok": True},
            "rule": {"looks": [2], "critical": [1.0], "sd_floor": 0.1, "significance": 0.1,
                     "tolerance": 0.1, "alpha": 0.01},
            "models": [{"name": "qwythos-9b", "role": "primary"},
                       {"name": "qwen3.6-35b-a3b", "role": "primary"}],
            "cells": [], "failures": [], "correctness": main, "correctness_guards": guards}


def inert(model: str) -> dict[str, Any]:
    return section(chunks(16, 256, 0.93, 0, 0), identical=True, model=model)


def worse(model: str) -> dict[str, Any]:
    return section(chunks(32, 256, 0.93, 2, 28), model=model)


def test_a_guard_model_that_got_worse_rejects_the_pr_and_the_comment_says_which() -> None:
    verdict = grade(results(inert("qwythos-9b"), [worse("qwen3.6-35b-a3b")]), POLICY)
    assert verdict["kind"] == "incorrect" and verdict["headline"] == "eval:REJECT"
    assert verdict["correctness"]["decision"] == "inert"  # the scored model itself is unchanged
    assert verdict["correctness_guards"][0]["decision"] == "reject"
    assert all(r.startswith("qwen3.6-35b-a3b: ") for r in verdict["reasons"])
    text = render_comment(verdict)
    assert "qwen3.6-35b-a3b (scored the same way): reject" in text


def test_unchanged_models_on_both_sides_reject_nothing() -> None:
    verdict = grade(results(inert("qwythos-9b"), [inert("qwen3.6-35b-a3b")]), POLICY)
    assert verdict["kind"] != "incorrect"
    assert [g["decision"] for g in verdict["correctness_guards"]] == ["inert"]
    assert "qwen3.6-35b-a3b (scored the same way): inert" in render_comment(verdict)


def test_the_scored_models_reject_is_kept_whatever_the_guard_says() -> None:
    verdict = grade(results(worse("qwythos-9b"), [inert("qwen3.6-35b-a3b")]), POLICY)
    assert verdict["kind"] == "incorrect"
    assert not any(r.startswith("qwen3.6-35b-a3b") for r in verdict["reasons"])


def test_a_malformed_guard_section_is_a_contract_error() -> None:
    doc = results(inert("qwythos-9b"), [inert("qwen3.6-35b-a3b")])
    doc["box"] = {"name": "b"}
    assert validate(copy.deepcopy(doc))["correctness_guards"]
    bad = copy.deepcopy(doc)
    bad["correctness_guards"][0]["chunks"] = []
    with pytest.raises(ContractError, match="chunks"):
        validate(bad)
    bad["correctness_guards"] = ["not a section"]
    with pytest.raises(ContractError, match="sections only"):
        validate(bad)


def test_the_sparkinfer_job_scores_both_models_and_survives_json() -> None:
    box = BoxConfig(name="b", kind="local", workdir="/tmp/w", repo="/tmp/r")
    job = make_job(load_profile("sparkinfer"), POLICY, box, "a" * 40, "b" * 40, seed=3)
    assert job.correctness is not None
    assert (job.correctness.model, job.correctness.guards) == ("qwythos-9b", ["qwen3.6-35b-a3b"])
    doc = json.loads(job.to_json())
    assert parse_job(doc).correctness == job.correctness
    doc["correctness"]["guards"] = ["no-such-model"]
    with pytest.raises(ContractError, match="guards"):
        parse_job(doc)


@pytest.mark.parametrize("guards", [["qwythos-9b"], ["nope"], ["qwen3.6-35b-a3b"] * 2])
def test_a_profile_guard_must_be_another_model_of_it(tmp_path: Path, guards: list[str]) -> None:
    doc = yaml.safe_load((PROFILES / "sparkinfer.yaml").read_text())
    doc["correctness"]["guards"] = guards
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="guards"):
        load_profile(str(path))


def test_the_harness_scores_each_guard_model_with_the_scored_models_recipe(
        tmp_path: Path) -> None:
    """The demo engine for real: a broken PR, a second model (the same weights under another
    name) as the guard; its section is its own model's and rejects as the first does."""
    from evalbot.engine.demo import generate
    from evalbot.engine.harness.steps import guard_sections
    from evalbot.engine.harness.stopwatch import Stopwatch
    from evalbot.engine.sides.build import build_side
    from evalbot.grading.correctness_policy import decide

    repo = generate(tmp_path / "demo")
    doc = yaml.safe_load((PROFILES / "demo.yaml").read_text())
    doc["models"].append({**doc["models"][0], "name": "tiny-guard", "namespace": "eval-guard"})
    doc["correctness"]["guards"] = ["tiny-guard"]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    box = BoxConfig(name="local", kind="local", workdir=str(tmp_path / "box"),
                    repo=str(repo.path), models_dir=str(repo.model_path.parent), trusted=True)
    job = make_job(load_profile(str(path)), POLICY, box, repo.main_sha, repo.prs["broken"],
                   seed=7)
    jobdir = tmp_path / "job"
    built = {side: build_side(job, side, sha, jobdir)
             for side, sha in (("base", job.base_sha), ("head", job.head_sha))}
    assert all(b.ok for b in built.values())
    watch = Stopwatch()
    sections = guard_sections(job, built, jobdir, REPO_ROOT, [], device_identity(), watch.stage)
    assert [s["model"] for s in sections] == ["tiny-guard"]
    assert decide(sections[0], POLICY.correctness)["decision"] == "reject"
    # the guard's score processes are box time of the correctness stages, as the scored model's
    ran = {name for name, seconds in watch.timing()["stages"].items() if seconds > 0}
    assert ran - {"rest"} == {"correctness_reference", "correctness_base", "correctness_head"}
