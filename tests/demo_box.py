"""The demo engine on a box over SSH, as a real box has it: a Python with numpy the sandbox user
may run, the generated demo repository and model where the sandbox user can read them, and the
box's config for `evaluate` (tests/test_demo_over_ssh.py, tests/test_witness_attacks.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from evalbot.config.settings import BoxConfig
from evalbot.engine.demo import DemoRepo, generate
from evalbot.evaluation.evaluate import Outcome
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
            # lazy: a sandboxed process of the module's last test may still be exiting
            subprocess.run(["umount", "--lazy", str(site)], check=True)


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[Path, DemoRepo]]:
    root = Path(tempfile.mkdtemp(prefix="evalbot-demo-ssh-"))
    root.chmod(0o755)  # the sandbox user reads the model; the harness (root) the rest
    try:
        yield root, generate(root / "demo")
    finally:
        subprocess.run(["rm", "-rf", "--", str(root)], check=True)


def box_config(sshd: Sshd, root: Path, demo: DemoRepo, python: str,
               launcher: tuple[str, ...] = ()) -> BoxConfig:
    """The box: a root harness (no sudo) unless `launcher` is the sudo rule of an unprivileged
    one (tests/unprivileged_box.py); its workdir root/box, made here unless it is there."""
    workdir = root / "box"
    workdir.mkdir(exist_ok=True)
    os.chmod(workdir, 0o711)  # the sandbox user must traverse to its job directory
    kw = sshd.box_kwargs()
    return BoxConfig(name="gpu1", kind="ssh", workdir=str(workdir), repo=str(demo.path),
                     models_dir=str(demo.model_path.parent), host=str(kw["host"]),
                     port=int(str(kw["port"])), user=str(kw["user"]),
                     key_file=str(kw["key_file"]), known_hosts=str(kw["known_hosts"]),
                     python=python, sandbox_user=SANDBOX_USER, sandbox_launcher=launcher)


Evaluator = Callable[[str, int, str], Outcome]  # (head SHA, PR number, out folder's name)


@contextmanager
def ssh_evaluator(sshd: Sshd, python: str, demo: tuple[Path, DemoRepo], out: Path,
                  base_sha: str | None = None, launcher: tuple[str, ...] = (),
                  full_profile: bool = False,
                  profile_path: Path | None = None) -> Iterator[tuple[Evaluator, BoxConfig]]:
    """Demo PRs evaluated in the production shape: `evaluate()` over the SSH box with its
    sandbox user, the demo profile cut to its witnessed cell, one store at out/evalbot.sqlite3,
    each run's published files under out/<name>. Against main unless `base_sha` says;
    `launcher` as box_config's; `full_profile`: the shipped demo profile, every cell;
    `profile_path`: that profile instead (tests/demo_profile.py's one-look profile)."""
    from evalbot.config.redact import for_boxes
    from evalbot.config.settings import REPO_ROOT
    from evalbot.evaluation.evaluate import evaluate
    from evalbot.evaluation.profile import load_profile
    from evalbot.grading.policy import load_labels
    from evalbot.remote.ssh import SSHBox, SSHTarget
    from evalbot.store.jobs import Store
    from tests.demo_profile import cut_demo_profile

    root, repo = demo
    config = box_config(sshd, root, repo, python, launcher)
    box = SSHBox(config.name, config.workdir, SSHTarget(**sshd.box_kwargs()))  # type: ignore[arg-type]
    policy = load_labels(REPO_ROOT / "labels.yaml").policy("default")
    profile = load_profile(str(profile_path) if profile_path else
                           "demo" if full_profile else str(cut_demo_profile(out / "profile")))
    store = Store(out / "evalbot.sqlite3")

    def run(head_sha: str, pr: int, name: str) -> Outcome:
        return evaluate(box, config, profile, policy, repo="demo/engine", pr=pr,
                        base_sha=base_sha or repo.main_sha, head_sha=head_sha, out=out / name,
                        store=store, redact=for_boxes([config]))

    try:
        yield run, config
    finally:
        box.close()
        store.close()


def evaluate_over_ssh(sshd: Sshd, python: str, demo: tuple[Path, DemoRepo], out: Path,
                      head_sha: str, pr: int, base_sha: str | None = None,
                      launcher: tuple[str, ...] = (),
                      profile_path: Path | None = None) -> tuple[Outcome, BoxConfig]:
    """One demo PR evaluated by `ssh_evaluator`, its published files under out/out."""
    with ssh_evaluator(sshd, python, demo, out, base_sha, launcher,
                       profile_path=profile_path) as (run, config):
        return run(head_sha, pr, "out"), config
