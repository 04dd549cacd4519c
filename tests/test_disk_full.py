"""Fill the job directory's disk: the box's workdir is a small tmpfs, the PR's build writes more
than fits. The job must end as one clean infra-error that names the full disk (a full disk is the
box's condition: the sandbox's per-stage file size limit is what bounds a PR), with its results
file written and exactly one job recorded in the store."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.errors import PipelineError
from evalbot.config.settings import REPO_ROOT, BoxConfig
from evalbot.engine.contract.job import parse_job
from evalbot.evaluation import pipeline
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.remote.ssh import SSHBox, SSHTarget
from evalbot.store.jobs import Store
from tests.sshd import SANDBOX_USER, Sshd, ensure_sandbox_user, pin_model, system_python
from tests.stub_engine import _git, job_doc, make_repo

FILL = "\nopen('fill.bin', 'wb').write(b'x' * (64 << 20))  # four times the box's disk\n"


@pytest.fixture(scope="module")
def stub() -> Iterator[tuple[Path, str, str]]:
    """main, and a head whose build writes a 64 MiB file (the stub build plus FILL)."""
    ensure_sandbox_user()
    with tempfile.TemporaryDirectory(prefix="evalbot-disk-") as tmp:
        repo, main, _ = make_repo(Path(tmp), {}, main={"work_s": 0.05})
        _git(repo, "checkout", "-q", "--detach", main)
        (repo / "build.py").write_text((repo / "build.py").read_text() + FILL)
        _git(repo, "commit", "-q", "-am", "a build that fills the disk")
        head = _git(repo, "rev-parse", "HEAD")
        _git(repo, "checkout", "-q", "main")
        yield repo, main, head


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 16 MiB tmpfs as the box's workdir (CI runs as root, so `mount` is permitted)."""
    with tempfile.TemporaryDirectory(prefix="evalbot-smalldisk-") as tmp:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0711", "tmpfs", tmp],
                       check=True)
        try:
            yield Path(tmp)
        finally:
            subprocess.run(["umount", "--lazy", tmp], check=True)


def _job(repo: Path, base: str, head: str) -> Any:
    doc: dict[str, Any] = job_doc(repo, base, head, looks=[3, 4])
    pin_model(doc, repo.parent)
    py = system_python()  # PR code runs as the sandbox user: a system interpreter it may run
    doc.update(job_id="job1", build_argv=[py, "build.py"])
    doc["runs"][0]["argv"][0] = py
    return parse_job(doc)


def _run(sshd: Sshd, workdir: Path, repo: Path, job: Any, out: Path, store: Store) -> str:
    """The bot's side of one evaluation, as evalbot.evaluation.evaluate runs it: lease, run, record."""
    # the harness runs as root here: the test's interpreter (with numpy) serves it
    config = BoxConfig(name="gpu1", kind="ssh", workdir=str(workdir), repo=str(repo),
                       python=sys.executable, sandbox_user=SANDBOX_USER)
    row = store.enqueue("stub/engine", 1, job.head_sha, "default", base_sha=job.base_sha)
    leased = store.lease("cli-gpu1", ttl_s=600, box="gpu1")
    assert leased is not None and leased.id == row.id
    box = SSHBox("gpu1", str(workdir), SSHTarget(**sshd.box_kwargs()))  # type: ignore[arg-type]
    try:
        results = pipeline.evaluate(box, config, job, out)
    except PipelineError as exc:
        store.fail(row.id, "cli-gpu1", str(exc), retry=False)
        raise
    finally:
        box.close()
    store.finish(row.id, "cli-gpu1", grade(results, _policy()), results)
    return row.id


def _policy() -> Any:
    return load_labels(REPO_ROOT / "labels.yaml").policy("default")


def test_a_build_that_fills_the_disk_is_one_clean_infra_error(sshd, stub, small_disk, tmp_path):
    repo, main, head = stub
    store = Store(tmp_path / "evalbot.sqlite3")
    _run(sshd, small_disk, repo, _job(repo, main, head), tmp_path, store)
    failures = json.loads((tmp_path / "results.json").read_text())["failures"]
    assert failures and all(f["kind"] == "infra-error" for f in failures)
    assert any("the box's disk is full" in f["message"] for f in failures)
    assert all(f["attribution"] == "infra" for f in failures)  # never the PR's, never a REJECT
    history = store.history(repo="stub/engine")
    assert len(history) == 1
    assert history[0]["verdict"]["kind"] == "infra-error"
    assert "REJECT" not in history[0]["headline"]
    assert [p.name for p in (small_disk / "jobs").iterdir()] == ["job1"]  # started once
    store.close()
