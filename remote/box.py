"""The Box interface: everything the bot does on a GPU machine goes through these calls.

A box runs argv lists (never shell strings), moves files, and starts detached runs that outlive
the bot's connection; the bot follows a detached run through files in its job directory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class BoxError(Exception):
    """The box could not do what was asked (connection, timeout, missing file): infra's fault."""


class ConnectionLost(BoxError):
    """The connection dropped or the box is unreachable: reconnecting may fix it."""


@dataclass(frozen=True)
class RunResult:
    returncode: int
    output: str  # stdout and stderr together, as the caller saw them stream


@dataclass(frozen=True)
class Detached:
    """A run that survives a dropped connection: found again by its job directory."""

    jobdir: str
    pid: int


class Box(Protocol):
    name: str
    workdir: str  # the root under which job directories live on the box

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> RunResult:
        """Run argv on the box; raise BoxError on timeout or when the box is unreachable."""
        ...

    def put(self, local: Path, remote: str) -> None:
        """Copy a local file or directory tree to `remote` (created, parents included)."""
        ...

    def get(self, remote: str, local: Path) -> None:
        """Copy one remote file to `local`; BoxError if it does not exist."""
        ...

    def start_detached(self, argv: Sequence[str], *, jobdir: str) -> Detached:
        """Start argv in its own session with output to jobdir/harness.log; return at once."""
        ...

    def is_running(self, detached: Detached) -> bool:
        """Whether the detached run's process is still alive."""
        ...

    def reconnect(self) -> None:
        """Drop the connection and open a new one; BoxError while the box stays unreachable."""
        ...

    def close(self) -> None:
        ...
