"""Issue 45: a PR that exhausts the box is the PR's failure, in the production shape (a real sshd
on loopback, the sandbox user, `evaluate()` with an SSH box, the cut demo profile and its
`limits`), on a root harness and on an unprivileged one that enters the sandbox through the sudo
rule and may make no cgroup (tests/unprivileged_box.py).

- **A build that fills the disk** (a 96 MiB tmpfs as the box's workdir; the head's build writes
  until it is full, far past the profile's 16 MB build cap): the head gets its verdict,
  `build-failed` (REJECT) with the cap in its one-line reason, never `infra-error` (which the
  worker retries); its tree is emptied, and the next job on the box, an honest PR, runs to its
  verdict. The same build as main's is infra-error: nothing can be said about the PR.
- **A run that fills its tmpfs** (its bench writes 128 MiB to /dev/shm, sized 64 MB): the run
  fails and the head gets REJECT. Before caps each private tmpfs was half the RAM: it fitted.
- **A run that fills its memory**: one process past RLIMIT_DATA (both harnesses), and, where the
  harness makes cgroups, three processes each under it and together past the run's memory
  cgroup, whose OOM killer ends the run: REJECT naming the cap.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalbot.engine.demo import DemoRepo
from evalbot.evaluation.evaluate import Outcome
from evalbot.store.jobs import Store
from tests import hostile_demo as hd
from tests.demo_box import box_python, demo, evaluate_over_ssh
from tests.demo_profile import WITNESS_ONE_LOOK, one_look_demo_profile
from tests.sshd import Sshd
from tests.unprivileged_box import HARNESS_USER, Unprivileged, unprivileged

__all__ = ["box_python", "demo", "unprivileged"]  # fixtures

HARNESSES = ("root", "unprivileged")
WORKDIR_MB = 96

FILLS_THE_DISK = [(
    '    print(f"built {target} (source sha256 {info[\'source_sha256\'][:12]})")\n',
    '    print(f"built {target} (source sha256 {info[\'source_sha256\'][:12]})")\n'
    "    with open(BUILD / 'fill.bin', 'wb') as fill:  # until the disk is full\n"
    "        for _ in range(4096):\n"
    "            fill.write(b'x' * (1 << 20))\n"
    "            fill.flush()\n",
)]

FILLS_ITS_TMPFS = [(
    "    cfg, weights = load_weights(args.model)\n    model = Model(cfg, weights)\n"
    "    ctxs = ",
    "    with open('/dev/shm/fill.bin', 'wb') as fill:  # 128 MiB: twice its tmpfs\n"
    "        for _ in range(128):\n"
    "            fill.write(b'x' * (1 << 20))\n"
    "    cfg, weights = load_weights(args.model)\n    model = Model(cfg, weights)\n"
    "    ctxs = ",
)]

# 2 GiB in one process: past RLIMIT_DATA (the profile's 1024 MB run cap)
ONE_PROCESS = "np.ones(1 << 28).sum()"
# three processes of 600 MiB each: each under RLIMIT_DATA, together past the memory cgroup
THREE_PROCESSES = ("[p.join() for p in [p for p in [__import__('multiprocessing').Process("
                   "target=lambda: np.ones(600 << 17).sum() + __import__('time').sleep(2)) "
                   "for _ in range(3)] if p.start() is None]]")


def _fills_its_memory(allocation: str) -> list[tuple[str, str]]:
    return [("    cfg, weights = load_weights(args.model)\n    model = Model(cfg, weights)\n"
             "    ctxs = ",
             f"    {allocation}\n"
             "    cfg, weights = load_weights(args.model)\n    model = Model(cfg, weights)\n"
             "    ctxs = ")]


class Box:
    """The demo box of one harness kind: its sshd, its sudo rule, its workdir's owner."""

    def __init__(self, kind: str, sshd: Sshd, unpriv: Unprivileged | None) -> None:
        self.kind = kind
        self.sshd = unpriv.sshd if unpriv is not None else sshd
        self.launcher = ("sudo", "-n", str(unpriv.launcher)) if unpriv is not None else ()
        self.uid = pwd.getpwnam(HARNESS_USER).pw_uid if unpriv is not None else 0
        # the unprivileged sshd has a mount namespace of its own (its sudo rule): mounts for
        # its harness are made there, and its paths seen through it
        pid = self.sshd.proc.pid if unpriv is not None and self.sshd.proc else None
        self.enter = ("nsenter", "-t", str(pid), "-m") if pid else ()
        self.root = Path(f"/proc/{pid}/root") if pid else Path("/")
        self.memory_cgroup = False  # what the last evaluation's results said

    def seen(self, path: Path) -> Path:
        """`path` as the box's harness sees it."""
        return self.root / path.relative_to("/")

    def evaluate(self, python: str, demo: tuple[Path, DemoRepo], out: Path, head: str,
                 base: str | None = None,
                 profile: Path | None = None) -> tuple[Outcome, dict[str, Any]]:
        workdir = self.seen(demo[0] / "box")  # the harness's own, as box init makes it
        workdir.mkdir(exist_ok=True)
        os.chown(workdir, self.uid, -1)
        outcome, _config = evaluate_over_ssh(self.sshd, python, demo, out, head, pr=45,
                                             base_sha=base, launcher=self.launcher,
                                             profile_path=profile)
        store = Store(out / "evalbot.sqlite3")
        try:
            [row] = store.history(repo="demo/engine")  # one job, recorded once
            assert row["verdict"]["kind"] == outcome.verdict["kind"]
        finally:
            store.close()
        caps = json.loads((out / "out" / "private" / "results.json").read_text())["box"]["caps"]
        assert caps["run"]["memory_mb"] == 1024 and caps["build"]["disk_mb"] == 16, caps
        [jobdir] = [p for p in (workdir / "jobs").iterdir() if p.name == row["job_id"]]
        assert jobdir.stat().st_uid == self.uid  # the harness ran as the box's harness user
        self.memory_cgroup = bool(caps["memory_cgroup"])
        assert not (self.kind == "unprivileged" and self.memory_cgroup)
        return outcome, outcome.verdict


@pytest.fixture(params=HARNESSES)
def box(request: pytest.FixtureRequest, sshd: Sshd) -> Box:
    unpriv = request.getfixturevalue("unprivileged") if request.param == "unprivileged" else None
    return Box(request.param, sshd, unpriv)


@pytest.fixture
def small_disk(box: Box, demo: tuple[Path, DemoRepo]) -> Iterator[Path]:
    """A 96 MiB tmpfs as the box's workdir, the harness's (CI runs as root: `mount` works)."""
    workdir = demo[0] / "box"
    workdir.mkdir()
    subprocess.run([*box.enter, "mount", "-t", "tmpfs", "-o",
                    f"size={WORKDIR_MB}m,mode=0711,uid={box.uid}", "tmpfs", str(workdir)],
                   check=True)
    try:
        yield box.seen(workdir)
    finally:
        subprocess.run([*box.enter, "umount", "--lazy", str(workdir)], check=True)


RUN_FAILED = "the PR's timed run failed or printed nothing the harness could read"


def _assert_the_pr_s_reject(verdict: dict[str, Any], kind: str, reason: str, published: str,
                            out: Path) -> None:
    """REJECT with the reason in one line; a kind the worker never retries (only infra-error).
    The harness's reason stays in the operator's raw results; the published verdict says a
    fixed sentence (evalbot/report/failure_text.py), naming the cap where a cap stopped it."""
    assert verdict["kind"] == kind and verdict["headline"] == "eval:REJECT", verdict["reasons"]
    [failure] = verdict["failures"]
    assert failure["side"] == "head" and failure["attribution"] == "pr", failure
    assert failure["message"] == published, failure["message"]
    raw = json.loads((out / "out" / "private" / "results.json").read_text())["failures"]
    assert any(reason in f["message"] and "\n" not in f["message"] for f in raw), raw


def test_a_build_that_fills_the_disk_is_the_pr_s_and_the_next_job_runs(
        box, box_python, demo, small_disk, tmp_path):
    _root, repo = demo
    filler = hd.head(repo, "fills-the-disk", FILLS_THE_DISK, file="build.py")
    _, verdict = box.evaluate(box_python, demo, tmp_path / "pr", filler)
    _assert_the_pr_s_reject(verdict, "build-failed",
                            "its build wrote more than its disk cap of 16 MB",
                            "the PR's build wrote more than its disk cap", tmp_path / "pr")
    free = shutil.disk_usage(small_disk).free
    assert free > WORKDIR_MB / 2 * (1 << 20), free  # its tree was emptied: the room is back
    # the next job runs to a verdict, any verdict: one look of each (the statistics are not what
    # a full disk could have broken; its build, samples, witness and score runs are)
    quick = one_look_demo_profile(tmp_path / "one-look", WITNESS_ONE_LOOK)
    _, verdict = box.evaluate(box_python, demo, tmp_path / "next", repo.prs["neutral"],
                              profile=quick)
    assert verdict["kind"] in ("neutral", "inconclusive", "improved"), verdict["reasons"]
    assert not verdict["failures"]
    _, verdict = box.evaluate(box_python, demo, tmp_path / "main", repo.main_sha, base=filler)
    assert verdict["kind"] == "infra-error", verdict["reasons"]  # main's: not the PR's fault
    [failure] = verdict["failures"]
    assert failure["side"] == "base" and "build failed" in failure["message"], failure


def test_a_run_that_fills_its_tmpfs_is_the_pr_s(box, box_python, demo, tmp_path):
    _root, repo = demo
    head = hd.head(repo, "fills-its-tmpfs", FILLS_ITS_TMPFS)
    _, verdict = box.evaluate(box_python, demo, tmp_path, head)
    _assert_the_pr_s_reject(verdict, "crashed", "exit status 1", RUN_FAILED, tmp_path)


def test_a_run_that_fills_its_memory_is_the_pr_s(box, box_python, demo, tmp_path):
    _root, repo = demo
    head = hd.head(repo, "fills-one-process", _fills_its_memory(ONE_PROCESS))
    _, verdict = box.evaluate(box_python, demo, tmp_path / "one", head)
    _assert_the_pr_s_reject(verdict, "crashed", "exit status 1",  # MemoryError at RLIMIT_DATA
                            RUN_FAILED, tmp_path / "one")
    if not box.memory_cgroup:
        return  # no memory cgroup without the right to make one: RLIMIT_DATA is the cap
    head = hd.head(repo, "fills-three-processes", _fills_its_memory(THREE_PROCESSES))
    _, verdict = box.evaluate(box_python, demo, tmp_path / "three", head)
    _assert_the_pr_s_reject(verdict, "crashed", "went past its memory cap of 1024 MB",
                            "the PR's timed run went past its memory cap", tmp_path / "three")

