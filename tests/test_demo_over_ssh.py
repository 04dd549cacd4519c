"""The demo engine evaluated over SSH end to end: a real sshd on loopback, the sandbox on, the
bundled demo repository and model, one PR graded and rendered the way the service would (the
demo profile cut to its witnessed cell, tests/demo_profile.py: the box is what it checks)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.demo import DemoRepo, generate
from evalbot.config.redact import for_boxes
from evalbot.config.settings import REPO_ROOT, BoxConfig
from evalbot.evaluation.evaluate import evaluate
from evalbot.evaluation.profile import load_profile
from evalbot.grading.policy import load_labels
from evalbot.store.jobs import Store
from remote.ssh import SSHBox, SSHTarget
from tests.demo_profile import cut_demo_profile
from tests.sshd import SANDBOX_USER, Sshd, ensure_sandbox_user, system_python

NEEDS = "import numpy"  # what the demo engine and the harness import


def _sandbox_can_run(python: str) -> bool:
    done = subprocess.run(["runuser", "-u", SANDBOX_USER, "--", python, "-c", NEEDS],
                          capture_output=True, timeout=120)
    return done.returncode == 0


@pytest.fixture(scope="module")
def box_python() -> Iterator[str]:
    """A Python with numpy that the sandbox user may run, as a real box has.

    When the test's own interpreter lives where the sandbox user cannot reach (pyenv under
    /root, with an absolute runpath to its libpython there), a venv of the system Python sees
    its site-packages through a bind mount outside /root: same packages, reachable by all."""
    ensure_sandbox_user()
    if _sandbox_can_run(sys.executable):
        yield sys.executable
        return
    import sysconfig

    with tempfile.TemporaryDirectory(prefix="evalbot-boxpy-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        site = root / "site"
        site.mkdir()
        subprocess.run(["mount", "--bind", "-o", "ro", sysconfig.get_paths()["purelib"],
                        str(site)], check=True)
        try:
            subprocess.run([system_python(), "-m", "venv", "--without-pip", str(root / "venv")],
                           check=True)
            python = root / "venv" / "bin" / "python"
            purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                      "get_paths()['purelib'])"], check=True, text=True,
                                     capture_output=True).stdout.strip()
            (Path(purelib) / "box-packages.pth").write_text(f"{site}\n")
            assert _sandbox_can_run(str(python)), "the box python cannot import numpy"
            yield str(python)
        finally:
            subprocess.run(["umount", str(site)], check=True)


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[Path, DemoRepo]]:
    root = Path(tempfile.mkdtemp(prefix="evalbot-demo-ssh-"))
    root.chmod(0o755)  # the sandbox user reads the model; the harness (root) the rest
    try:
        yield root, generate(root / "demo")
    finally:
        subprocess.run(["rm", "-rf", "--", str(root)], check=True)


def _box_config(sshd: Sshd, root: Path, demo: DemoRepo, python: str) -> BoxConfig:
    workdir = root / "box"
    workdir.mkdir()
    os.chmod(workdir, 0o711)  # the sandbox user must traverse to its job directory
    kw = sshd.box_kwargs()
    return BoxConfig(name="gpu1", kind="ssh", workdir=str(workdir), repo=str(demo.path),
                     models_dir=str(demo.model_path.parent), host=str(kw["host"]),
                     port=int(str(kw["port"])), user=str(kw["user"]),
                     key_file=str(kw["key_file"]), known_hosts=str(kw["known_hosts"]),
                     python=python, sandbox_user=SANDBOX_USER)  # root harness: no sudo


def test_broken_demo_pr_over_ssh_is_incorrect_and_names_no_box(sshd, box_python, demo,
                                                                  tmp_path):
    root, repo = demo
    config = _box_config(sshd, root, repo, box_python)
    box = SSHBox(config.name, config.workdir, SSHTarget(**sshd.box_kwargs()))  # type: ignore[arg-type]
    policy = load_labels(REPO_ROOT / "evalbot" / "labels.yaml").policy("default")
    profile = load_profile(str(cut_demo_profile(tmp_path / "profile")))
    store = Store(tmp_path / "evalbot.sqlite3")
    try:
        outcome = evaluate(box, config, profile, policy, repo="demo/engine", pr=4,
                           base_sha=repo.main_sha, head_sha=repo.prs["broken"],
                           out=tmp_path / "out", store=store, redact=for_boxes([config]))
    finally:
        box.close()
    verdict = outcome.verdict
    assert verdict["kind"] == "incorrect", verdict["reasons"]
    assert verdict["correctness"]["decision"] == "reject"
    assert verdict["failures"] == []
    jobs = list((Path(config.workdir) / "jobs").iterdir())
    assert len(jobs) == 1  # one job directory: started exactly once
    assert [h["verdict"]["kind"] for h in store.history(repo="demo/engine")] == ["incorrect"]
    store.close()
    comment = (tmp_path / "out" / "comment.md").read_text()
    assert comment == outcome.comment and verdict["headline"] in comment
    for secret in ("127.0.0.1", config.workdir, config.key_file, config.known_hosts):
        assert secret not in comment
    assert not re.search(rf"(?<![\d.]){config.port}(?![\d.])", comment)
