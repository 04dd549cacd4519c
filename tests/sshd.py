"""A real OpenSSH sshd for the tests: loopback, a free port, generated host and client keys.

The test owns every process here: the listener it starts and the per-connection sshd processes
the listener forks (found by their parent pid, never by name), so it can drop connections and
restart the server in the middle of an evaluation.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "evalbot-test", "-f",
                    str(path)], check=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Sshd:
    def __init__(self, root: Path, user: str = "root") -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root, self.user, self.port = root, user, free_port()
        self.host_key = keygen(root / "host_key")
        self.client_key = keygen(root / "client_key")
        (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
        self.known_hosts = root / "known_hosts"
        self.pin(self.host_key)
        self.config = root / "sshd_config"
        self.config.write_text(self._config())
        self.proc: subprocess.Popen[bytes] | None = None

    def pin(self, host_key: Path) -> None:
        """Write the known_hosts entry the bot trusts (the way an admin pins a box's key)."""
        kind, blob = host_key.with_suffix(".pub").read_text().split()[:2]
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {kind} {blob}\n")

    def _config(self) -> str:
        return "\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {self.host_key}",
            f"PidFile {self.root / 'sshd.pid'}", f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
            "PubkeyAuthentication yes", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password", "UsePAM no",
            "StrictModes no", f"AllowUsers {self.user}", "Subsystem sftp internal-sftp",
            "LogLevel ERROR", "MaxStartups 50",
        ]) + "\n"

    def start(self, prefix: tuple[str, ...] = ()) -> None:
        """Listen; `prefix` runs sshd in a setting of its own (its argv, then sshd's)."""
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        self.proc = subprocess.Popen([*prefix, SSHD, "-D", "-e", "-f", str(self.config)],
                                     stdout=subprocess.DEVNULL, stderr=open(self.root / "log", "ab"))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("sshd exited: " + (self.root / "log").read_text()) from None
                time.sleep(0.05)
        raise RuntimeError("sshd did not start listening")

    def sessions(self) -> list[int]:
        """The per-connection sshd processes of our listener (its children)."""
        if self.proc is None:
            return []
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                found.append(int(pid))
        return found

    def drop_connections(self) -> int:
        """Kill every open SSH session, as a network failure or a crashed sshd would end it."""
        killed = self.sessions()
        for pid in killed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(killed)

    def stop(self) -> None:
        self.drop_connections()
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def box_kwargs(self) -> dict[str, object]:
        return {"host": "127.0.0.1", "port": self.port, "user": self.user,
                "key_file": str(self.client_key), "known_hosts": str(self.known_hosts)}


def per_worker(name: str) -> str:
    """A name of this checkout's pytest-xdist worker alone: the sandbox kills every process of its
    user after each run, so two workers (or two checkouts' suites) must never share one."""
    import hashlib

    checkout = hashlib.sha256(str(Path(__file__).resolve().parents[1]).encode()).hexdigest()[:4]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return f"{name}-{checkout}-{worker}"


SANDBOX_USER = per_worker("evalbot-sandbox")


def ensure_sandbox_user() -> None:
    """The unprivileged user PR code runs as (what `evalbot box init` creates on a real box)."""
    import pwd

    try:
        pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
                        "/nonexistent", "--shell", "/usr/sbin/nologin", SANDBOX_USER], check=True)


@contextmanager
def reachable_dir(prefix: str) -> Iterator[Path]:
    """A directory outside pytest's 0700 tmp, removed after: the sandbox user must reach the
    job directories and models a test puts there."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o755)
    try:
        yield root
    finally:
        subprocess.run(["rm", "-rf", "--", str(root)], check=True)


def system_python() -> str:
    """An interpreter every user may run (the test's own may live under root's home)."""
    for path in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(path, os.X_OK):
            return path
    raise RuntimeError("no system python3 for the sandbox user")


def pin_model(doc: dict, root: Path) -> Path:
    """Give a stub job a real model file with its true sha256 (boxes verify models)."""
    import hashlib

    model = root / "model.bin"
    model.write_bytes(b"weights" * 1000)
    model.chmod(0o644)
    doc["models"][0].update(path=str(model), sha256=hashlib.sha256(model.read_bytes()).hexdigest())
    return model


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """A real sshd for a test module (used through tests/conftest.py)."""
    server = Sshd(tmp_path_factory.mktemp("sshd"))
    server.start()
    yield server
    server.stop()
