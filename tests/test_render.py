"""Rendering: the marker line, units, the size cap, and no leak of canaries planted in logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalbot.config.redact import for_boxes
from evalbot.config.settings import REPO_ROOT, BoxConfig
from evalbot.engine.contract.job import parse_job
from evalbot.engine.harness.steps import run_job
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.report.render import COMMENT_LIMIT, render_comment
from tests.stub_engine import job_doc, make_repo

CANARY_TOKEN = "ghp_" + "C4NARY" * 6
CANARY_HOST = "gpu-canary-7.internal.example"
CANARY_IP = "203.0.113.77"
LEAKY = (f"cannot reach {CANARY_HOST} ({CANARY_IP}:2222) as root@{CANARY_HOST} "
         f"with {CANARY_TOKEN} @maintainer <script>x</script> ``` breakout")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("render")
    repo, main, shas = make_repo(root, {
        "faster": {"decode": 1300.0, "prefill": 1.3e6},
        "leaky": {"build_fails": True, "message": LEAKY},
    })
    return {name: run_job(parse_job(job_doc(repo, main, sha)), root / name)
            for name, sha in shas.items()}


def _policy():
    return load_labels(REPO_ROOT / "labels.yaml").policy("default")


def _redactor():
    box = BoxConfig(name="box-a", kind="ssh", workdir="/srv/evalbot", repo="/srv/evalbot/r",
                    host=CANARY_HOST, port=2222, user="evalbot")
    return for_boxes([box], secrets=[CANARY_TOKEN])


def test_verdict_comment_has_marker_table_and_units(results) -> None:
    verdict = grade(results["faster"], _policy())
    text = render_comment(verdict, _redactor())
    first = text.splitlines()[0]
    assert first.startswith("<!-- evalbot:v1 ") and first.endswith(" -->")
    assert verdict["headline"] in text
    assert "tok/s" in text and "| decode @ 128 |" in text and "| prefill @ 4k |" in text
    assert len(text) <= COMMENT_LIMIT


def test_failure_comment_redacts_and_neutralises_the_log(results) -> None:
    verdict = grade(results["leaky"], _policy())
    assert verdict["kind"] == "build-failed"
    text = render_comment(verdict, _redactor())
    for canary in (CANARY_TOKEN, CANARY_HOST, CANARY_IP, "2222", "root@"):
        assert canary not in text
    assert "<script>" not in text and "@maintainer" not in text
    assert "```" not in text  # no log tail is published at all (docs/box.md)
    assert "evalbot publishes no raw output" in text
    assert "PR's failure" in text


def test_redactor_patterns_without_configuration() -> None:
    from evalbot.config.redact import Redactor

    clean = Redactor()("token github_pat_" + "A" * 30 + " at 10.1.2.3:22 as ubuntu@box.example")
    assert "github_pat_" not in clean and "10.1.2.3" not in clean and "ubuntu@" not in clean


def test_comment_is_capped_at_githubs_limit(results) -> None:
    verdict = grade(results["faster"], _policy())
    verdict["reasons"] = ["x" * 1000] * 100
    assert len(render_comment(verdict)) <= COMMENT_LIMIT


def test_stale_template_variables_fail_loudly(results, tmp_path: Path) -> None:
    import jinja2

    from evalbot.report.render import environment

    with pytest.raises(jinja2.UndefinedError):
        environment().from_string("{{ missing }}").render()


def test_marker_line_survives_any_redaction(results) -> None:
    from evalbot.config.redact import Redactor
    from evalbot.report.render import MARKER_PREFIX

    for name in ("faster", "leaky"):  # the verdict comment and the failure comment
        verdict = grade(results[name], _policy())
        text = render_comment(verdict, Redactor(["evalbot", "head", "kind"]))
        assert text.splitlines()[0].startswith(MARKER_PREFIX)
        assert "evalbot" not in text.split("\n", 1)[1]  # the rest is still redacted
