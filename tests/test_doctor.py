"""`evalbot doctor` against a local box and a real sshd: every check named, nothing leaked."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import yaml

from tests.demo_box import box_python
from tests.sshd import SANDBOX_USER, Sshd, ensure_sandbox_user
from tests.stub_engine import make_repo
from tests.unprivileged_box import Unprivileged, unprivileged

__all__ = ["box_python", "unprivileged"]  # fixtures

PROFILE = """
name: doctored
gpu: false
build: {argv: ["{python}", "build.py"], artifacts: [build/engine.py]}
models:
  - {name: m, file: m.bin, sha256: PIN, role: primary, namespace: eval-m}
speed:
  looks: [3, 5]
  sd_floor: 0.01
  runs:
    - model: m
      argv: ["{python}", "{build}/build/engine.py", "--ctxs", "{ctxs}"]
      parse: {kind: json_line, prefix: "BENCH_JSON ", fields: {decode: "{ctx}.decode_tps"}}
      cells: [{metric: decode, ctx: 128}]
limits: {run: {memory_mb: 512, disk_mb: 32}}
"""


def _setup(tmp_path: Path, pin_ok: bool, box: dict[str, object]) -> Path:
    models = tmp_path / "models"
    models.mkdir()
    (models / "m.bin").write_bytes(b"weights")
    digest = hashlib.sha256(b"weights" if pin_ok else b"other").hexdigest()
    profile = tmp_path / "doctored.yaml"
    profile.write_text(PROFILE.replace("PIN", digest))
    repo, _, _ = make_repo(tmp_path / "src", {})
    config = tmp_path / "evalbot.yaml"
    config.write_text(yaml.safe_dump({
        "profile": str(profile), "boxes": [{"name": "box-a", "workdir": str(tmp_path / "w"),
                                            "repo": str(repo), "models_dir": str(models),
                                            "python": sys.executable, **box}]}))
    return config


def _doctor(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evalbot", "doctor", "--config", str(config)],
                          capture_output=True, text=True, timeout=300)


def test_local_box_passes_every_check(tmp_path: Path) -> None:
    done = _doctor(_setup(tmp_path, True, {"kind": "local", "trusted": True, "unsandboxed": True}))
    assert done.returncode == 0, done.stdout + done.stderr
    for line in ("box box-a: reachable", "python with numpy", "engine repository",
                 "model m sha256: m.bin matches its pin"):
        assert line in done.stdout


def test_a_model_that_does_not_match_its_pin_fails(tmp_path: Path) -> None:
    done = _doctor(_setup(tmp_path, False, {"kind": "local", "trusted": True, "unsandboxed": True}))
    assert done.returncode == 1
    assert "FAIL  box box-a: model m sha256: m.bin: sha256" in done.stdout
    assert "1 check(s) failed" in done.stderr


def test_ssh_box_is_checked_and_its_address_never_printed(tmp_path: Path, sshd: Sshd) -> None:
    ensure_sandbox_user()  # doctor starts a command in the sandbox as this user
    done = _doctor(_setup(tmp_path, True, {"kind": "ssh", **sshd.box_kwargs(),
                                           "sandbox_launcher": [],  # root harness: no sudo
                                           "sandbox_user": SANDBOX_USER}))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok    box box-a: reachable: ssh" in done.stdout
    assert "ok    box box-a: sandbox works: sandbox: bubblewrap works (each run: sized tmpfs, " \
        "RLIMIT_DATA)" in done.stdout
    [limits] = [ln for ln in done.stdout.splitlines() if ln.startswith("ok    box box-a: limits")]
    assert limits.endswith("RLIMIT_DATA and sized tmpfs; profile doctored: run disk_mb 32, "
                           "memory_mb 512"), limits  # a root harness: with a memory cgroup here
    assert str(sshd.port) not in done.stdout and "127.0.0.1" not in done.stdout


def test_an_unprivileged_box_says_its_runs_get_no_memory_cgroup(
        tmp_path: Path, unprivileged: Unprivileged, box_python: str) -> None:
    """The harness user may make no cgroup (tests/unprivileged_box.py): doctor says which caps
    its runs get; and a launcher installed by an older box init, which would refuse every run's
    RLIMIT_DATA, fails the sandbox check with what to do."""
    box = {"kind": "ssh", **unprivileged.sshd.box_kwargs(), "sandbox_user": SANDBOX_USER,
           "sandbox_launcher": ["sudo", "-n", str(unprivileged.launcher)], "python": box_python}
    done = _doctor(_setup(tmp_path, True, box))
    [limits] = [ln for ln in done.stdout.splitlines() if ": limits:" in ln]
    assert limits.startswith("ok    box box-a: limits: no memory cgroup (the harness may not "
                             "make one): RLIMIT_DATA and sized tmpfs only"), limits
    launcher = unprivileged.launcher.read_text()
    old = launcher.replace(" (each run: sized tmpfs, RLIMIT_DATA)", "")
    try:
        unprivileged.launcher.write_text(old)
        (tmp_path / "old").mkdir()
        done = _doctor(_setup(tmp_path / "old", True, box))
    finally:
        unprivileged.launcher.write_text(launcher)
    assert "FAIL  box box-a: sandbox works: the installed launcher predates sized tmpfs " \
        "mounts and RLIMIT_DATA: run `evalbot box init` again" in done.stdout


def test_unpinned_host_key_is_refused_with_a_clear_line(tmp_path: Path, sshd: Sshd) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    done = _doctor(_setup(tmp_path, True, {"kind": "ssh", **sshd.box_kwargs(),
                                           "known_hosts": str(empty)}))
    assert done.returncode == 1
    line = next(ln for ln in done.stdout.splitlines() if "reachable" in ln)
    assert line.startswith("FAIL") and "host key" in line.lower()
    assert str(sshd.port) not in done.stdout


def test_a_box_without_the_gpu_the_profile_needs_fails_in_one_line(tmp_path: Path) -> None:
    config = _setup(tmp_path, True, {"kind": "local", "trusted": True, "unsandboxed": True})
    profile = tmp_path / "doctored.yaml"
    profile.write_text(profile.read_text().replace("gpu: false", "gpu: true"))
    done = _doctor(config)
    gpu = [ln for ln in done.stdout.splitlines() if ": GPU:" in ln]
    assert len(gpu) == 1 and gpu[0].startswith("FAIL") and "nvidia-smi" in gpu[0]
    assert done.returncode == 1
