"""The warmed reference cache is as out of the sandbox's reach as an evaluation's own: a hostile
head of tests/test_redteam.py, told every path `python -m engine warm-reference` wrote (the box's
model directory, and with it the cache's parent, is visible inside its sandbox), tries to list
and read each from its build and from every timed sample, through the real sandbox, after the
warm-up filled the cache. It reads nothing, changes nothing, and the evaluation scores against
the warmed entries without running the reference."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from evalbot.config.settings import REPO_ROOT
from evalbot.engine.contract.job import parse_job
from evalbot.engine.scoring.tokens import corpus_bytes
from tests.test_redteam import _assert_untouched, _git, _job, _run, _snapshot, box

__all__ = ["box"]  # fixture
WINDOW = 512  # ids per window: a grid of some 200 windows of the corpus's bytes


def _warm(doc: dict, box: Path) -> None:
    """The harness's warm-up on this box's cache, as `evalbot warm-reference` starts it."""
    job = box / "warm.json"
    job.write_text(parse_job({**doc, "job_id": "warm"}).to_json())
    subprocess.run([sys.executable, "-m", "engine", "warm-reference", str(job), "--jobdir",
                    str(box / "jobs" / "warm"), "--batch", "4000"], cwd=REPO_ROOT, check=True,
                   capture_output=True, timeout=600)


def _tell_the_head(box: Path, doc: dict, files: list[Path], folders: list[Path]) -> None:
    """A new head commit whose attack.json names every warmed path."""
    repo = box / "src"
    _git(repo, "checkout", "-q", "--detach", doc["head_sha"])
    attack = json.loads((repo / "attack.json").read_text())
    attack.update(snoop=True, secrets=[str(p) for p in files], list=[str(p) for p in folders])
    (repo / "attack.json").write_text(json.dumps(attack))
    _git(repo, "commit", "-q", "-am", "snoop the warmed reference")
    doc["head_sha"] = _git(repo, "rev-parse", "HEAD")


def _sums(files: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_a_sandboxed_head_finds_nothing_of_the_warmed_reference(box: Path) -> None:
    doc, jobdir = _job(box, {"snoop": True}, correctness=True)
    doc["correctness"]["window_tokens"] = WINDOW
    _warm(doc, box)
    cache = box / "cache"
    files = sorted(p for p in (cache / "reference").rglob("*") if p.is_file())
    assert len(files) == len(corpus_bytes()[0]) // WINDOW + 1  # the whole grid, the manifest
    folders = [cache, cache / "reference", *sorted({p.parent for p in files})]
    told = [p for p in files if p.name == "manifest.json"] + files[:40]  # each log < 1 MiB
    _tell_the_head(box, doc, told, folders)
    runs_before = (box / "reference.log").read_text()
    sums, before = _sums(files), _snapshot(box)
    results = _run(doc, jobdir)
    logs = {p.name: p.read_text() for p in (jobdir / "logs").glob("*.log")}
    build = logs["build-head.log"]
    for path in told:
        assert f"build read {path}: " in build  # tried, and
    for path in folders:
        assert f"build list {path}: " in build
    samples = [text for name, text in logs.items() if "read " in text and name != "build-head.log"]
    assert samples  # the timed samples tried too
    allowed = [line for text in logs.values() for line in text.splitlines() if "allowed" in line]
    assert allowed == []  # nothing was read or listed
    assert results["failures"] == [], [f["message"] for f in results["failures"]]
    reference = results["correctness"]["reference"]
    assert reference["cached"] == 4 and reference["scored"] == 0  # the warmed entries served
    assert (box / "reference.log").read_text() == runs_before  # no reference process ran
    assert _sums(files) == sums
    _assert_untouched(box, before)
