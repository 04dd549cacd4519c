"""One whole rendered comment of each verdict kind, held byte for byte (issue 54): the other comment
tests check properties, these catch any change to what a PR's author reads. Each is rendered as
the service publishes it (the verdict graded from a GPU run's results, with those results).

    python -m tests.test_comment_snapshots    # rewrite them after a deliberate change to the
                                              # comment, and read the diff before committing
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from evalbot.engine.contract.results import upgrade, validate
from evalbot.evaluation.evaluate import failure_verdict
from evalbot.grading.policy import load_labels
from evalbot.report.publication import graded
from evalbot.report.render import render_comment

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
SNAPSHOTS = DATA / "comments" / "snapshots"
POLICY = load_labels(ROOT / "labels.yaml").policy("default")
# each kind's snapshot, and the results it is graded from
GRADED = {
    "improved": "sparkinfer/accept-h200/prefill-32k",
    "neutral": "sparkinfer/v7-h100/aa-speed",
    "inconclusive": "sparkinfer/v7-h100/hide-decode",
    "regressed": "llamacpp/h200-slow",
    "incorrect": "sparkinfer/phase2-broken-h200",
    "spoofed": "sparkinfer/v7-h100/liar-cut",
    "infra-error": "sparkinfer/stable-h100/aa",
}
# the PR's own failures, planted in the demo's faster run: (stage, what the harness saw)
PR_FAILURES = {"build-failed": "build", "crashed": "speed", "timeout": "speed"}


def _results(name: str) -> dict[str, Any]:
    return validate(upgrade(json.loads((DATA / f"{name}.results.json").read_text())))


def _pr_failure(kind: str) -> dict[str, Any]:
    results = _results("comments/demo-faster")
    results["failures"] = [{"stage": PR_FAILURES[kind], "side": "head", "attribution": "pr",
                            "kind": kind, "message": "make: *** [all] Error 2",
                            "log_tail": "error: expected ';'"}]
    return results


def comment(name: str) -> str:
    """The comment of one snapshot's name: a verdict kind, or "failure" (no results at all)."""
    if name == "failure":
        job = SimpleNamespace(id="job-snapshot", base_sha="a" * 40, head_sha="b" * 40)
        return render_comment(failure_verdict(job, POLICY, "demo",  # type: ignore[arg-type]
                                              "the box did not answer"))
    results = _results(GRADED[name]) if name in GRADED else _pr_failure(name)
    return render_comment(graded(results, POLICY), results=results)


NAMES = [*GRADED, *PR_FAILURES, "failure"]


@pytest.mark.parametrize("name", NAMES)
def test_the_rendered_comment_is_its_snapshot(name: str) -> None:
    text = comment(name)
    assert text == (SNAPSHOTS / f"{name}.md").read_text(), \
        f"the {name} comment changed: python -m tests.test_comment_snapshots, and read the diff"


def test_each_snapshot_is_of_its_kind() -> None:
    """A snapshot of the wrong verdict would hold the wrong comment just as firmly."""
    for name in NAMES:
        marker = (SNAPSHOTS / f"{name}.md").read_text().splitlines()[0]
        kind = "infra-error" if name == "failure" else name
        assert marker.startswith("<!-- evalbot:v1 ") and f'"kind": "{kind}"' in marker, name


if __name__ == "__main__":
    SNAPSHOTS.mkdir(exist_ok=True)
    for snapshot in NAMES:
        (SNAPSHOTS / f"{snapshot}.md").write_text(comment(snapshot))
    print(f"{SNAPSHOTS.relative_to(ROOT)}: {len(NAMES)} comments", file=sys.stderr)
