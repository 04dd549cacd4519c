"""Shadow mode's record: the `shadow_log` table of the store file (a connection of its own), one
row per write evalbot would have made on GitHub (evalbot.github.shadow), read back by
`evalbot shadow-report`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from evalbot.store import schema


class ShadowLog:
    def __init__(self, path: Path) -> None:
        self.db = schema.connect(path, shared=True)  # the service's threads publish through it

    def record(self, action: str, pr: int | None, sha: str, payload: dict[str, Any],
               headline: str = "", kind: str = "") -> float:
        """One write; returns when it was recorded."""
        at = time.time()
        with self.db:
            self.db.execute("INSERT INTO shadow_log (at, action, pr, sha, headline, kind, payload)"
                            " VALUES (?,?,?,?,?,?,?)",
                            (at, action, pr, sha, headline, kind, json.dumps(payload)))
        return at

    def verdicts(self) -> dict[int, tuple[str, str, str]]:
        """PR -> (head SHA, headline, kind) of the latest verdict recorded."""
        rows = self.db.execute("SELECT pr, sha, headline, kind FROM shadow_log WHERE "
                               "action='verdict' ORDER BY id").fetchall()
        return {int(pr): (sha, headline, kind) for pr, sha, headline, kind in rows}

    def close(self) -> None:
        self.db.close()
