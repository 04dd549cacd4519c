"""The scoring's one failure: which side (base, head or the reference), what kind, the log."""

from __future__ import annotations

from pathlib import Path


class ScoreFailure(Exception):
    def __init__(self, side: str, kind: str, message: str, log: Path | None = None) -> None:
        super().__init__(message)
        self.side, self.kind, self.message, self.log = side, kind, message, log
