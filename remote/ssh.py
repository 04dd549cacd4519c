"""The SSH box: a GPU machine reached with paramiko, key authentication and a pinned host key.

Every command is an argv list, each element quoted with shlex.quote, so nothing from a pull
request is ever interpreted by the remote shell. The host key must already be in the pinned
known_hosts file: an unknown or changed key is refused, never added.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko

from evalbot.remote.box import BoxError, ConnectionLost, Detached, RunResult

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SKIP = ("__pycache__",)
# A process's start time (field 22 of /proc/PID/stat; the fields after the ")" of its name).
_STARTTIME = "sed 's/.*) //' /proc/{pid}/stat 2>/dev/null | cut -d' ' -f20"


@dataclass(frozen=True)
class SSHTarget:
    host: str
    port: int
    user: str
    key_file: str
    known_hosts: str
    connect_timeout_s: float = 15.0
    keepalive_s: int = 10


class SSHBox:
    """A Box over SSH; reconnects on demand (`reconnect`) after a dropped connection."""

    def __init__(self, name: str, workdir: str, target: SSHTarget) -> None:
        self.name = name
        self.workdir = workdir
        self.target = target
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None

    # -- connection -------------------------------------------------------------------------

    def connect(self) -> None:
        """Open the connection; BoxError names a refused host key or an unreachable box."""
        self.close()
        t = self.target
        client = paramiko.SSHClient()
        try:
            client.load_host_keys(t.known_hosts)  # only the pinned file, never ~/.ssh
        except OSError as exc:
            raise BoxError(f"box {self.name}: cannot read its pinned known_hosts file "
                           f"{t.known_hosts} ({exc.strerror}); {_pin_step(t.known_hosts)}") from exc
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                t.host, port=t.port, username=t.user, key_filename=t.key_file,
                allow_agent=False, look_for_keys=False, timeout=t.connect_timeout_s,
                banner_timeout=t.connect_timeout_s, auth_timeout=t.connect_timeout_s,
            )
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise BoxError(f"box {self.name}: host key CHANGED (got {exc.key.get_name()} "
                           f"{exc.key.get_fingerprint().hex()}); refusing to connect") from exc
        except paramiko.AuthenticationException as exc:
            client.close()
            raise BoxError(f"box {self.name}: key authentication refused") from exc
        except paramiko.SSHException as exc:
            client.close()
            if "not found in known_hosts" in str(exc):
                raise BoxError(f"box {self.name}: host key is not in the pinned known_hosts "
                               "file; refusing to connect (keys are never added automatically); "
                               f"{_pin_step(t.known_hosts)}") from exc
            raise ConnectionLost(f"box {self.name}: SSH failed: {exc}") from exc
        except (OSError, EOFError) as exc:
            client.close()
            raise ConnectionLost(f"box {self.name}: unreachable ({_reason(exc)})") from exc
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(t.keepalive_s)  # a dead peer is noticed, not waited on forever
        self._client = client

    def reconnect(self) -> None:
        self.connect()

    def _live(self) -> paramiko.SSHClient:
        """The open connection; a dropped one is reported, not silently replaced, so the
        caller decides when to reconnect (with backoff) and can count the drops."""
        if self._client is None:
            self.connect()
        elif not self._transport_ok():
            raise ConnectionLost(f"box {self.name}: connection lost")
        assert self._client is not None
        return self._client

    def _transport_ok(self) -> bool:
        transport = self._client.get_transport() if self._client else None
        return transport is not None and transport.is_active()

    def _sftp_client(self) -> paramiko.SFTPClient:
        client = self._live()
        if self._sftp is None or self._sftp.get_channel() is None \
                or self._sftp.get_channel().closed:  # type: ignore[union-attr]
            self._sftp = client.open_sftp()
            self._sftp.get_channel().settimeout(60)  # type: ignore[union-attr]
        return self._sftp

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- commands ---------------------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> RunResult:
        """Run argv; the box's `timeout` kills it there too, so a timeout leaves nothing behind."""
        remote_limit = max(1, int(timeout_s))
        command = command_line(["timeout", "-k", "5", str(remote_limit), *argv], cwd, env)
        try:
            channel = self._live().get_transport().open_session()  # type: ignore[union-attr]
            channel.set_combine_stderr(True)
            channel.exec_command(command)
            return self._collect(channel, time.monotonic() + remote_limit + 15, on_output)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectionLost(f"box {self.name}: connection lost ({_reason(exc)})") from exc

    def _collect(self, channel: paramiko.Channel, deadline: float,
                 on_output: Callable[[str], None] | None) -> RunResult:
        chunks: list[bytes] = []
        pending = b""
        channel.settimeout(1.0)
        while True:
            if time.monotonic() > deadline:
                channel.close()
                raise ConnectionLost(f"box {self.name}: no answer within the command's limit")
            try:
                data = channel.recv(65536)
            except TimeoutError:
                if not self._transport_ok():
                    raise ConnectionLost(f"box {self.name}: connection lost") from None
                continue
            if not data:
                break
            chunks.append(data)
            if on_output is not None:
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    on_output(line.decode("utf-8", errors="replace"))
        if on_output is not None and pending:
            on_output(pending.decode("utf-8", errors="replace"))
        status = channel.recv_exit_status()
        channel.close()
        if status == -1:  # the session ended without an exit status: the connection dropped
            raise ConnectionLost(f"box {self.name}: connection lost during the command")
        if status == 124:
            raise BoxError(f"box {self.name}: command timed out")
        return RunResult(status, b"".join(chunks).decode("utf-8", errors="replace"))

    # -- files ------------------------------------------------------------------------------

    def put(self, local: Path, remote: str) -> None:
        try:
            sftp = self._sftp_client()
            if local.is_dir():
                self._put_tree(sftp, local, remote)
            else:
                self._mkdirs(sftp, posixpath.dirname(remote))
                sftp.put(str(local), remote)
                sftp.chmod(remote, stat.S_IMODE(local.stat().st_mode))
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectionLost(f"box {self.name}: cannot copy to the box ({_reason(exc)})") \
                from exc

    def _put_tree(self, sftp: paramiko.SFTPClient, local: Path, remote: str) -> None:
        self._mkdirs(sftp, remote)
        for entry in sorted(local.iterdir()):
            if entry.name in _SKIP or entry.suffix == ".pyc":
                continue
            target = posixpath.join(remote, entry.name)
            if entry.is_dir():
                self._put_tree(sftp, entry, target)
            elif entry.is_file():
                sftp.put(str(entry), target)
                sftp.chmod(target, stat.S_IMODE(entry.stat().st_mode))

    @staticmethod
    def _mkdirs(sftp: paramiko.SFTPClient, path: str) -> None:
        parts: list[str] = []
        head = path
        while head not in ("", "/"):
            parts.append(head)
            head = posixpath.dirname(head)
        for part in reversed(parts):
            try:
                sftp.stat(part)
            except FileNotFoundError:
                sftp.mkdir(part)

    def get(self, remote: str, local: Path) -> None:
        try:
            sftp = self._sftp_client()
            local.parent.mkdir(parents=True, exist_ok=True)
            sftp.get(remote, str(local))
        except FileNotFoundError as exc:
            raise BoxError(f"no such file on box {self.name}: {posixpath.basename(remote)}") \
                from exc
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectionLost(f"box {self.name}: cannot copy from the box ({_reason(exc)})") \
                from exc

    # -- detached runs ----------------------------------------------------------------------

    def start_detached(self, argv: Sequence[str], *, jobdir: str) -> Detached:
        """setsid + nohup: the run has its own session and survives this connection's end.

        The process's start time goes next to its pid, so a reused pid is never taken for it."""
        q = shlex.quote
        script = (f"mkdir -p -- {q(jobdir)} && cd -- {q(jobdir)} && "
                  f"{{ nohup setsid {join(argv)} >>harness.log 2>&1 </dev/null & }} && "
                  f"echo $! >harness.pid && {_STARTTIME.format(pid='$!')} >harness.start "
                  f"&& cat harness.pid")
        got = self.run(["sh", "-c", script], timeout_s=60)
        pid = got.output.strip().splitlines()[-1] if got.output.strip() else ""
        if got.returncode != 0 or not pid.isdigit():
            raise BoxError(f"box {self.name}: could not start the detached run")
        return Detached(jobdir, int(pid))

    def is_running(self, detached: Detached) -> bool:
        """Alive (not a zombie), and the same process: its start time matches the recorded one."""
        start = shlex.quote(posixpath.join(detached.jobdir, "harness.start"))
        now = _STARTTIME.format(pid=int(detached.pid))
        state = f"sed 's/.*) //' /proc/{int(detached.pid)}/stat 2>/dev/null | cut -c1"
        script = f'test "$({state})" != Z && test "$({now})" = "$(cat {start})"'
        return self.run(["sh", "-c", script], timeout_s=30).returncode == 0

def join(argv: Sequence[str]) -> str:
    if not argv:
        raise BoxError("empty command")
    return " ".join(shlex.quote(str(a)) for a in argv)


def command_line(argv: Sequence[str], cwd: str | None, env: Mapping[str, str] | None) -> str:
    """One remote shell line in which every argument is a quoted literal."""
    parts = []
    if cwd is not None:
        parts.append(f"cd -- {shlex.quote(cwd)} &&")
    if env:
        for key in env:
            if not _ENV_NAME.match(key):
                raise BoxError(f"invalid environment variable name {key!r}")
        parts.append("env " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()))
    if "=" in str(argv[0]):
        raise BoxError(f"command {argv[0]!r} looks like an assignment")
    parts.append(join(argv))
    return " ".join(parts)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return str(text)


def _pin_step(known_hosts: str) -> str:
    """How an operator pins a box's key (the box's host and port stay out of the message)."""
    return (f"pin it once with `ssh-keyscan -p PORT HOST >> {known_hosts}` after checking the "
            "fingerprint it prints against `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` "
            "run on the box")
