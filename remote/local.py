"""The local box: this machine, for the demo, the tests and a trusted GPU host."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from evalbot.remote.box import BoxError, Detached, RunResult


class LocalBox:
    def __init__(self, name: str, workdir: str) -> None:
        self.name = name
        self.workdir = workdir
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        Path(workdir).mkdir(parents=True, exist_ok=True)

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> RunResult:
        full_env = {**os.environ, **(env or {})}
        try:
            proc = subprocess.Popen(
                list(argv), cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, start_new_session=True,
            )
        except OSError as exc:
            raise BoxError(f"cannot start {argv[0]!r}: {exc}") from exc
        try:
            if on_output is None:
                out, _ = proc.communicate(timeout=timeout_s)
            else:
                out = self._stream(proc, on_output, timeout_s)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            proc.communicate()
            raise BoxError(f"command timed out after {timeout_s:.0f} s") from exc
        return RunResult(proc.returncode, out)

    @staticmethod
    def _stream(proc: subprocess.Popen[str], on_output: Callable[[str], None],
                timeout_s: float) -> str:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            on_output(line.rstrip("\n"))
        proc.wait(timeout=timeout_s)
        return "".join(lines)

    def put(self, local: Path, remote: str) -> None:
        dest = Path(remote)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if local.is_dir():
            shutil.copytree(local, dest, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(local, dest)

    def get(self, remote: str, local: Path) -> None:
        if not Path(remote).is_file():
            raise BoxError(f"no such file on box {self.name}: {Path(remote).name}")
        local.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(remote, local)

    def start_detached(self, argv: Sequence[str], *, jobdir: str) -> Detached:
        Path(jobdir).mkdir(parents=True, exist_ok=True)
        with open(Path(jobdir) / "harness.log", "ab") as log:
            proc = subprocess.Popen(
                list(argv), cwd=jobdir, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        (Path(jobdir) / "harness.pid").write_text(str(proc.pid))
        self._children[proc.pid] = proc
        return Detached(jobdir, proc.pid)

    def is_running(self, detached: Detached) -> bool:
        child = self._children.get(detached.pid)
        if child is not None:
            return child.poll() is None  # also reaps our own zombie
        try:
            os.kill(detached.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def reconnect(self) -> None:
        return None  # nothing to reconnect: this machine is always reachable

    def close(self) -> None:
        return None
