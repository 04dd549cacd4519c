"""The frozen contracts: job description and results schema v1 are validated on read."""

from __future__ import annotations

import copy
import json

import pytest

from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.job import parse_job
from evalbot.engine.contract.results import RESULTS_SCHEMA, TIMING_STAGES, validate
from tests.stub_engine import job_doc

SHA_A, SHA_B = "a" * 40, "b" * 40


def _job() -> dict:
    return job_doc("/srv/repo", SHA_A, SHA_B)  # type: ignore[arg-type]


def test_job_round_trips_through_json() -> None:
    job = parse_job(_job())
    again = parse_job(json.loads(job.to_json()))
    assert again == job
    assert [c.key for c in job.cells] == ["m/decode@128", "m/prefill@4096"]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(base_sha="main"), "base_sha: 'main' is not a full 40-hex commit SHA"),
        (lambda d: d.update(head_sha="abc123"), "head_sha: 'abc123' is not a full"),
        (lambda d: d.update(schema="evalbot.job/9"), "schema: expected 'evalbot.job/1'"),
        (lambda d: d["runs"][0]["argv"].append("{branch}"), "unknown placeholder {branch}"),
        (lambda d: d["runs"][0]["cells"][0].update(metric="ttft"), "is not one of decode, prefill"),
        (lambda d: (d["runs"][0]["cells"][0].update(model="other"),  # (its witness names it)
                    d["runs"][0].pop("witnesses", None)), "is not in models"),
        (lambda d: d["rule"].update(looks=[5, 3], critical=[1.0, 1.0]), "increasing pair counts"),
        (lambda d: d["runs"][0].update(parse={"kind": "guess"}), "is not one of json_line"),
        (lambda d: d.pop("build_argv"), "build_argv: missing"),
        (lambda d: d["models"][0].update(role="sidekick"), "is not one of primary, guard"),
    ],
)
def test_bad_job_is_refused_naming_the_field(mutate, message) -> None:
    doc = _job()
    mutate(doc)
    with pytest.raises(ContractError, match=message.replace("(", r"\(").replace("{", r"\{")):
        parse_job(doc)


def _results() -> dict:
    return {
        "schema": RESULTS_SCHEMA, "job_id": "j", "profile": "p", "box": {},
        "base": {"sha": SHA_A, "ok": True}, "head": {"sha": SHA_B, "ok": True},
        "rule": {"looks": [3], "critical": [4.0], "sd_floor": 0.01, "significance": 0.02,
                 "tolerance": 0.02},
        "models": [],
        "cells": [{"model": "m", "metric": "decode", "ctx": 128, "higher_is_better": True,
                   "looks": [], "samples": [{"side": "base", "value": 10.0, "pair": 0,
                                             "dropped": False}]}],
        "correctness": None,
        "failures": [{"stage": "build", "side": "head", "attribution": "pr",
                      "kind": "build-failed", "message": "x"}],
        "timing": {"total_s": 12.5, "stages": {**dict.fromkeys(TIMING_STAGES, 0.0),
                                               "builds": 12, "rest": 0.5}},
    }


def test_valid_results_pass() -> None:
    assert validate(_results())["job_id"] == "j"


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("schema",), "evalbot.results/0", "schema: expected"),
        (("head", "sha"), "HEAD", "head.sha: 'HEAD' is not a full 40-hex"),
        (("cells", 0, "samples", 0, "value"), "fast", "cells[0].samples[0].value: expected float"),
        (("cells", 0, "samples", 0, "side"), "pr", "'pr' is not one of base, head"),
        (("failures", 0, "attribution"), "nobody", "failures[0].attribution"),
        (("cells", 0, "metric"), "latency", "cells[0].metric"),
        (("timing", "stages", "builds"), -1.0, "timing.stages.builds: seconds are finite and >= 0"),
        (("timing", "stages", "rest"), float("nan"), "timing.stages.rest: seconds are finite"),
        (("timing", "stages", "measuring"), "3 s", "timing.stages.measuring: expected float"),
        (("timing", "stages"), {"builds": 1.0}, "timing.stages.warmups: missing"),
        (("timing", "total_s"), float("inf"), "timing.total_s: seconds are finite and >= 0"),
    ],
)
def test_invalid_results_name_the_field(path, value, message) -> None:
    doc = copy.deepcopy(_results())
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ContractError, match=message.replace("[", r"\[").replace("]", r"\]")):
        validate(doc)


def test_results_of_older_harnesses_need_no_stages() -> None:
    """Their `timing` has the total alone, or there is none."""
    for timing in ({"total_s": 650.0}, None):
        doc = {**_results(), "timing": timing}
        assert validate(doc)["timing"] == timing
