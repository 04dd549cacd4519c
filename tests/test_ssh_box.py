"""The SSH box against a real OpenSSH sshd: pinned host keys, literal arguments, files, detached runs."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalbot.remote.box import BoxError, ConnectionLost
from evalbot.remote.ssh import SSHBox, SSHTarget
from tests.sshd import Sshd, keygen


@pytest.fixture(autouse=True)
def pinned(sshd: Sshd) -> None:
    sshd.pin(sshd.host_key)  # a test that changes the pin does not leak into the next


@pytest.fixture
def box(sshd: Sshd, tmp_path: Path) -> Iterator[SSHBox]:
    b = SSHBox("gpu1", str(tmp_path / "work"), SSHTarget(**sshd.box_kwargs()))  # type: ignore[arg-type]
    yield b
    b.close()


def test_connects_with_key_and_pinned_host_key(box: SSHBox) -> None:
    got = box.run(["id", "-un"], timeout_s=30)
    assert (got.returncode, got.output.strip()) == (0, "root")


def test_unknown_host_key_is_refused(sshd: Sshd, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    target = SSHTarget(**{**sshd.box_kwargs(), "known_hosts": str(empty)})  # type: ignore[arg-type]
    with pytest.raises(BoxError, match="not in the pinned known_hosts file; refusing") as err:
        SSHBox("gpu1", "/tmp", target).connect()
    assert not isinstance(err.value, ConnectionLost)  # reconnecting would not help
    assert empty.read_text() == ""  # never added


def test_changed_host_key_is_refused(sshd: Sshd, box: SSHBox, tmp_path: Path) -> None:
    sshd.pin(keygen(tmp_path / "other_host_key"))  # the pinned key is not the server's any more
    with pytest.raises(BoxError, match="host key CHANGED"):
        box.connect()


def test_wrong_client_key_is_refused(sshd: Sshd, tmp_path: Path) -> None:
    stranger = keygen(tmp_path / "stranger")
    target = SSHTarget(**{**sshd.box_kwargs(), "key_file": str(stranger)})  # type: ignore[arg-type]
    with pytest.raises(BoxError, match="key authentication refused"):
        SSHBox("gpu1", "/tmp", target).connect()


def test_unreachable_box_is_a_connection_loss(sshd: Sshd, tmp_path: Path) -> None:
    from tests.sshd import free_port

    target = SSHTarget(**{**sshd.box_kwargs(), "port": free_port(),  # type: ignore[arg-type]
                          "connect_timeout_s": 5.0})
    with pytest.raises(ConnectionLost, match="unreachable"):
        SSHBox("gpu1", "/tmp", target).connect()


@pytest.mark.parametrize("hostile", [
    "a b", "it's", '"double"', "$(touch /tmp/evalbot-pwned)", "x; touch /tmp/evalbot-pwned",
    "`touch /tmp/evalbot-pwned`", "a\nb", "*", "--", "$HOME", "&& false", "|| true", "\\",
])
def test_hostile_arguments_arrive_literally(box: SSHBox, hostile: str) -> None:
    got = box.run([sys.executable, "-c", "import sys; sys.stdout.write(sys.argv[1])", hostile],
                  timeout_s=30, cwd="/tmp", env={"EVIL": hostile})
    assert (got.returncode, got.output) == (0, hostile)
    env = box.run([sys.executable, "-c", "import os, sys; sys.stdout.write(os.environ['EVIL'])"],
                  timeout_s=30, env={"EVIL": hostile})
    assert env.output == hostile
    assert not Path("/tmp/evalbot-pwned").exists()


def test_bad_environment_name_is_refused(box: SSHBox) -> None:
    with pytest.raises(BoxError, match="invalid environment variable name"):
        box.run(["true"], timeout_s=30, env={"A;rm -rf /": "x"})


def test_streamed_output_and_exit_status(box: SSHBox) -> None:
    seen: list[str] = []
    got = box.run([sys.executable, "-c", "print('one'); print('two'); raise SystemExit(4)"],
                  timeout_s=30, on_output=seen.append)
    assert seen == ["one", "two"] and got.returncode == 4


def test_command_timeout_kills_the_command(box: SSHBox, tmp_path: Path) -> None:
    marker = tmp_path / "late"
    with pytest.raises(BoxError, match="timed out"):
        box.run(["sh", "-c", f"sleep 3; touch {marker}"], timeout_s=1)
    time.sleep(3)
    assert not marker.exists()  # killed on the box, not only abandoned by the client


def test_put_and_get_round_trip(box: SSHBox, tmp_path: Path) -> None:
    src = tmp_path / "tree"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("alpha")
    (src / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (src / "run.sh").chmod(0o755)
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "x.pyc").write_bytes(b"junk")
    remote = str(tmp_path / "remote" / "deep" / "tree")
    box.put(src, remote)
    assert (Path(remote) / "sub" / "a.txt").read_text() == "alpha"
    assert (Path(remote) / "run.sh").stat().st_mode & 0o111  # modes travel
    assert not (Path(remote) / "__pycache__").exists()
    box.get(remote + "/sub/a.txt", tmp_path / "back" / "a.txt")
    assert (tmp_path / "back" / "a.txt").read_text() == "alpha"
    with pytest.raises(BoxError, match="no such file"):
        box.get(remote + "/missing", tmp_path / "m")


def test_detached_run_survives_dropped_connections_and_restarts(box: SSHBox, sshd: Sshd,
                                                                tmp_path: Path) -> None:
    jobdir = tmp_path / "job"
    script = "import time, pathlib; time.sleep(2); pathlib.Path('finished').write_text('yes')"
    run = box.start_detached([sys.executable, "-c", script], jobdir=str(jobdir))
    assert box.is_running(run)
    assert sshd.drop_connections() >= 1
    with pytest.raises(ConnectionLost):
        box.run(["true"], timeout_s=30)
    sshd.stop()
    sshd.start()
    box.reconnect()
    assert box.is_running(run)  # still the same process, found again after the restart
    deadline = time.monotonic() + 30
    while box.is_running(run) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (jobdir / "finished").read_text() == "yes"
    assert not box.is_running(run)


def test_a_reused_pid_is_not_taken_for_the_run(box: SSHBox, tmp_path: Path) -> None:
    run = box.start_detached(["sleep", "30"], jobdir=str(tmp_path / "job"))
    (tmp_path / "job" / "harness.start").write_text("1\n")  # as if the pid now named another
    assert not box.is_running(run)
    box.run(["kill", str(run.pid)], timeout_s=30)
