"""Issue 46: main's drift against the correctness floors, told look by look.

One look of 28 windows told a main 3 points under its calibrated floor in fewer than half the
PRs (the independent check: 6 of 8 on llamacpp, 78% on sparkinfer 6 points under), and an inert
head stops scoring there. The harness now scores on while main is neither drifted nor cleared
(engine/contract/shared/drift.py); the grader replays it. The bench's figures: bench/guard_quality.py.
Here the real harness scores with a stub score tool whose main disagrees with the reference on a
share of positions that varies by window, the head bit-identical to main.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.settings import REPO_ROOT
from evalbot.engine.contract.shared import drift
from evalbot.engine.contract.shared.segments import chunk_looks, deep_chunks
from evalbot.engine.measure.gpu import device_identity
from evalbot.engine.scoring.correctness import score
from evalbot.engine.scoring.tokens import speed_tokens
from evalbot.engine.sides.build import Built
from evalbot.grading import correctness_drift
from evalbot.grading.correctness_policy import critical_values, decide, deep_critical
from evalbot.grading.policy import load_labels
from tests.test_correctness_policy import chunks
from tests.test_tokenize import _job, demo  # noqa: F401  (fixture)

POLICY = load_labels(REPO_ROOT / "labels.yaml").policy("default")
# The engine (base and head alike) gets a window's position wrong when (first id + position) % 10
# is below (first id % 4): 0-30% of a window's positions, by window; the reference never does.
SCORER = """import json, sys
tokens, out, topk, role = sys.argv[1:5]
rows = []
for w in json.load(open(tokens)):
    top, am = [], []
    for i in range(len(w) - 1):
        best = w[i + 1]
        if role == "engine" and (w[0] + i) % 10 < w[0] % 4:
            best = (best + 1) % 256
        top.append([[best, -0.1]] + [[(best + j + 1) % 256, -4.0 - j] for j in range(int(topk))])
        am.append(best)
    rows.append({"top": top, "argmax": am})
json.dump({"windows": rows}, open(out, "w"))
"""


def _score(demo: Any, tmp_path: Path, top1_floor: float, name: str) -> dict[str, Any]:  # noqa: F811
    stub = tmp_path / "scorer.py"
    stub.write_text(SCORER)
    job = _job(demo, tmp_path, [], job_id=name)
    assert job.correctness is not None
    argv = [sys.executable, str(stub), "{tokens}", "{out}", "{topk}"]
    floors = {"top1": top1_floor, "kl": 10.0}
    spec = replace(job.correctness, score_argv=[*argv, "engine"],
                   reference_argv=[*argv, "reference"], floors=floors,
                   drift=correctness_drift.rule(job.correctness.looks, floors,
                                                POLICY.correctness))
    spec = replace(spec, critical=critical_values(chunk_looks(spec, spec.looks)),
                   deep_critical=deep_critical(spec.looks, deep_chunks(spec)))
    job = replace(job, correctness=spec)
    built = {side: Built(side, "0" * 40, True, 0.0, False, tmp_path) for side in ("base", "head")}
    jobdir = tmp_path / name
    jobdir.mkdir()
    speed_tokens(jobdir, job, REPO_ROOT)
    return score(job, built, jobdir, REPO_ROOT, device=device_identity())


def test_main_is_scored_on_while_its_drift_is_undecided(demo: Any, tmp_path: Path) -> None:  # noqa: F811
    # a floor far under main: cleared at the first look, and the inert head stops there
    clear = _score(demo, tmp_path, 0.5, "clear")
    first = clear["rule"]["chunk_looks"][0]
    assert clear["identical"] and len(clear["chunks"]) == first
    assert [d["status"] for d in clear["drift_looks"]] == ["clear"]
    assert decide(clear, POLICY.correctness)["decision"] == "inert"
    # a floor a little over main's bound at the first look: neither drifted nor cleared there,
    # so its windows are scored to the next look, though the head is bit-identical
    level = drift.main_level(clear["chunks"], clear["rule"]["drift"]["critical"][0])
    floor = round(level["top1"]["mean"] + 0.5 * (level["top1"]["hi"] - level["top1"]["mean"]), 4)
    near = _score(demo, tmp_path, floor, "near")
    statuses = [d["status"] for d in near["drift_looks"]]
    assert statuses[0] == "undecided" and len(statuses) == 2 and statuses[1] != "undecided"
    assert near["identical"] and len(near["looks"]) == 1  # the head's verdict was told at once
    assert len(near["chunks"]) == near["rule"]["chunk_looks"][1]
    verdict = decide(near, POLICY.correctness)
    assert verdict["drift"] == (statuses[1] == "drift")
    assert verdict["decision"] == ("infra-error" if verdict["drift"] else "inert")
    # a floor far over main: drift at the first look, an infra-error, never a REJECT
    far = _score(demo, tmp_path, 0.99, "far")
    assert [d["status"] for d in far["drift_looks"]] == ["drift"]
    assert decide(far, POLICY.correctness)["decision"] == "infra-error"


def test_scoring_cut_short_of_an_undecided_drift_is_refused(demo: Any, tmp_path: Path) -> None:  # noqa: F811
    """The grader replays the harness's stop: a section that stopped with main's drift still
    undecided (a harness that skipped the test) is not graded."""
    clear = _score(demo, tmp_path, 0.5, "cut")
    level = drift.main_level(clear["chunks"], clear["rule"]["drift"]["critical"][0])
    cut = dict(clear)
    cut["rule"] = {**clear["rule"], "drift": {**clear["rule"]["drift"],
                                              "top1": level["top1"]["mean"] + 0.001}}
    with pytest.raises(Exception, match="drift"):
        decide(cut, POLICY.correctness)


def _rule(looks: list[int], floor: float) -> dict[str, Any]:
    return correctness_drift.rule(looks, {"top1": floor, "kl": 0.5}, POLICY.correctness)


@pytest.mark.parametrize("level, floor, status", [
    (0.90, 0.80, "clear"),  # 11 points over the floor
    (0.74, 0.80, "drift"),  # 7 points under it
    (0.795, 0.80, "undecided"),  # 1.3 points under it: neither, at a first look of 28 windows
])
def test_the_first_look_tells_drift_from_clear_and_waits_between(
        level: float, floor: float, status: str) -> None:
    rows = _windows(28, level)
    assert drift.status(rows, _rule([28, 96], floor), 0) == status


def test_the_last_look_always_tells() -> None:
    rows = _windows(28, 0.795)
    assert drift.status(rows, _rule([28], 0.80), 0) == "drift"  # under the floor at the end
    assert drift.status(rows, _rule([28], 0.785), 0) == "clear"  # over it


def _windows(n: int, level: float) -> list[dict[str, Any]]:
    """n windows of 256 positions, main's top-1 at about `level` - 0.8 points (chunks' whole
    counts) +- 6 points by window."""

    rows = chunks(n, 256, level, 0, 0, kl_base=0.01)
    for i, row in enumerate(rows):
        row["base_top1"] = row["head_top1"] = min(256, max(0, row["base_top1"] + (-1) ** i * 15))
    return rows
