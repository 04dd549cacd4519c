"""`./dev` on a fresh machine: a set-up step that fails is named and leaves nothing running, and
the apt steps wait for a package lock another process holds instead of failing at once.

`./dev` and .ci/ run as written, from a copy of the checkout's scripts, with stand-ins only for
the tools they call (the venv's python, ruff and mypy; apt-get): a real mypy run would take a
minute, and the real apt-get would change this machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from evalbot.config.settings import REPO_ROOT

DEADLINE_S = 60  # generous: a busy 2-core machine


def _script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _checkout_with_a_failing_step(root: Path) -> Path:
    """A copy of ./dev with a venv whose mypy runs until killed (its pid in mypy.pid), set-up
    steps that pass, and one that fails."""
    shutil.copy2(REPO_ROOT / "dev", root / "dev")
    shutil.copy2(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    venv = root / ".venv" / "bin"
    _script(venv / "python", "exit 0\n")  # pip install: nothing to do
    _script(venv / "ruff", "exit 0\n")
    _script(venv / "mypy", f'echo $$ > {root / "mypy.pid"}\nexec sleep 600\n')
    _script(root / ".ci" / "wheel-check", f'echo $$ > {root / "wheel.pid"}\nexec sleep 600\n')
    _script(root / ".ci" / "setup-a-fine", "exit 0\n")
    # it fails once the background mypy and wheel check run (the set-up steps run beside the
    # Python set-up that starts them): their kill is what the test checks
    _script(root / ".ci" / "setup-b-broken",
            f"for _ in $(seq {DEADLINE_S * 10}); do\n"
            f"  [ -e {root / 'mypy.pid'} ] && [ -e {root / 'wheel.pid'} ] && break; sleep 0.1\n"
            'done\necho "setup-b-broken: no disk" >&2\nexit 7\n')
    _script(root / ".ci" / "setup-c-never", f"touch {root / 'ran-c'}\n")
    return root


def test_a_failing_setup_step_is_named_and_leaves_nothing_running(tmp_path: Path) -> None:
    root = _checkout_with_a_failing_step(tmp_path)
    done = subprocess.run([str(root / "dev"), "test"], cwd=root, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 7
    assert "./dev: set-up: .ci/setup-b-broken failed (exit 7)" in done.stderr
    assert not (root / "ran-c").exists()  # the steps after it did not run
    deadline = time.monotonic() + DEADLINE_S
    for started in ("mypy.pid", "wheel.pid"):  # the background mypy and wheel check
        pid_file = root / started
        while not pid_file.exists() and time.monotonic() < deadline:  # killed before it began?
            time.sleep(0.05)
        if pid_file.exists():
            pid = int(pid_file.read_text())
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not _alive(pid), f"{started}: outlived ./dev"


def test_interrupted_dev_kills_its_background_jobs(tmp_path: Path) -> None:
    root = _checkout_with_a_failing_step(tmp_path)
    (root / ".ci" / "setup-b-broken").unlink()
    _script(root / ".ci" / "setup-b-slow", f"echo $$ > {root / 'slow.pid'}\nexec sleep 600\n")
    dev = subprocess.Popen([str(root / "dev"), "test"], cwd=root, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + DEADLINE_S
    while not all((root / name).exists() for name in ("slow.pid", "mypy.pid", "wheel.pid")):
        assert time.monotonic() < deadline and dev.poll() is None
        time.sleep(0.05)
    dev.terminate()  # SIGTERM to ./dev alone, as a CI runner's timeout sends it
    _, err = dev.communicate(timeout=DEADLINE_S)
    for started in ("mypy.pid", "wheel.pid", "slow.pid"):  # background jobs, the step they were in
        pid = int((root / started).read_text())
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), started
    assert dev.returncode == 143 and "set-up: .ci/setup-b-slow failed" in err


def test_a_second_run_does_not_install_what_the_first_did(tmp_path: Path) -> None:
    """pip install -e .[test] runs again only when pyproject.toml changed (it resolves every
    dependency anew on each run, for nothing, when the editable install is current)."""
    shutil.copy2(REPO_ROOT / "dev", tmp_path / "dev")
    shutil.copy2(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    venv = tmp_path / ".venv" / "bin"
    _script(venv / "python", f'echo "$*" >> {tmp_path / "python.calls"}\n')
    _script(venv / "ruff", "exit 0\n")
    _script(venv / "mypy", "exit 0\n")

    def run() -> list[str]:
        (tmp_path / "python.calls").unlink(missing_ok=True)
        done = subprocess.run([str(tmp_path / "dev"), "test", "tests/none.py"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return (tmp_path / "python.calls").read_text().splitlines()

    assert run() == ["-m pip install -q -e .[test]", "-m pytest tests/none.py"]
    assert run() == ["-m pytest tests/none.py"]
    with (tmp_path / "pyproject.toml").open("a") as toml:
        toml.write("# a new dependency\n")
    assert run() == ["-m pip install -q -e .[test]", "-m pytest tests/none.py"]


def test_the_services_set_up_runs_beside_pip_s_install(tmp_path: Path) -> None:
    """On a fresh machine apt's and npm's set-up and pip's install each wait minutes on the
    network: pip's install here finishes only once a set-up step has run, which ./dev running
    them one after the other never lets happen (pip's install would fail at its deadline)."""
    shutil.copy2(REPO_ROOT / "dev", tmp_path / "dev")
    shutil.copy2(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    ran = tmp_path / "service-ran"
    venv = tmp_path / ".venv" / "bin"
    _script(venv / "python", f'''if [ "$*" = "-m pip install -q -e .[test]" ]; then
  for _ in $(seq {DEADLINE_S * 10}); do [ -e {ran} ] && exit 0; sleep 0.1; done
  exit 9
fi
''')
    _script(venv / "ruff", "exit 0\n")
    _script(venv / "mypy", "exit 0\n")
    _script(tmp_path / ".ci" / "setup-a-service", f"touch {ran}\n")
    done = subprocess.run([str(tmp_path / "dev"), "test", "tests/none.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=DEADLINE_S + 60)
    assert done.returncode == 0, done.stderr
    assert "set-up done" in done.stdout


def _fake_apt(bin_dir: Path, held_for: int) -> Path:
    """An apt-get that refuses as Debian's does while another process holds the lock (the first
    `held_for` calls), then succeeds; each call's arguments are logged."""
    calls = bin_dir / "calls"
    _script(bin_dir / "apt-get", f'''echo "$*" >> {calls}
n=$(wc -l < {calls})
if [ "$n" -le {held_for} ]; then
  echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (unattended-upgr)" >&2
  echo "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another" \
       "process using it?" >&2
  exit 100
fi
''')
    return calls


def test_apt_waits_for_a_held_package_lock(tmp_path: Path) -> None:
    calls = _fake_apt(tmp_path / "bin", held_for=2)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    done = subprocess.run([str(REPO_ROOT / ".ci" / "apt-install"), "bubblewrap"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = calls.read_text().splitlines()
    assert len(lines) >= 3 and all("DPkg::Lock::Timeout=300" in line for line in lines)
    assert lines[-1].endswith("install -y -qq --no-install-recommends bubblewrap")
    assert "waiting for a package lock" in done.stderr


def test_apt_fails_at_once_on_an_error_that_is_not_a_lock(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    _script(bin_dir / "apt-get", 'echo "E: Unable to locate package nosuchthing" >&2\nexit 100\n')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run([str(REPO_ROOT / ".ci" / "apt-install"), "nosuchthing"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 100 and "Unable to locate package nosuchthing" in done.stderr
    assert "waiting" not in done.stderr
