"""Shadow mode: evaluate and grade every PR, publish nothing (the report: shadow_report.py).

`ShadowPublisher` has the Publisher's methods and attributes, but every write goes to the
store's shadow log (evalbot.store.shadow_log) (and, optionally, a JSON-lines file) instead of
GitHub. Reads (permissions, PR heads) still go through the port, so admission behaves as in
production. `evalbot shadow-report` (evalbot.github.shadow_report) then compares, per PR, the
verdict evalbot would have published with the `eval:*` label the existing bot put on the PR.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalbot.engine.contract.verdict import upgrade as upgrade_verdict
from evalbot.engine.contract.verdict import validate as validate_verdict
from evalbot.github.publish import Backoff, status_state
from evalbot.store.shadow_log import ShadowLog


class ShadowPublisher:
    """A drop-in for evalbot.github.publish.Publisher that records instead of publishing."""

    def __init__(self, store_path: Path, log_file: Path | None = None, bot_login: str = "",
                 context: str = "evalbot", backoff: Backoff | None = None) -> None:
        self.log = ShadowLog(store_path)
        self.log_file, self.bot_login, self.context = log_file, bot_login, context
        self.backoff = backoff or Backoff()  # handlers read GitHub through it; reads still happen

    def publish(self, number: int, sha: str, body: str, labels: list[str], state: str,
                description: str, target_url: str = "") -> None:
        self._record("publish", number, sha, {"body": body, "labels": labels, "state": state,
                                               "description": description})

    def publish_verdict(self, number: int, verdict: dict[str, Any], comment: str) -> None:
        validate_verdict(upgrade_verdict(verdict))
        sha = verdict["provenance"]["head_sha"]
        self._record("verdict", number, sha,
                     {"body": comment, "labels": list(verdict["labels"]),
                      "state": status_state(verdict["kind"]), "job_id":
                      verdict["provenance"].get("job_id")},
                     headline=verdict["headline"], kind=verdict["kind"])

    def sticky(self, number: int, body: str) -> None:
        self._record("comment", number, "", {"body": body})

    def reply(self, number: int, text: str, key: str = "") -> None:
        self._record("reply", number, "", {"body": text})

    def unlabel(self, number: int, name: str) -> None:
        self._record("unlabel", number, "", {"label": name})

    def labels(self, number: int, wanted: list[str]) -> None:
        self._record("labels", number, "", {"labels": wanted})

    def status(self, sha: str, state: str, description: str, target_url: str = "") -> None:
        self._record("status", None, sha, {"state": state, "description": description,
                                           **({"target_url": target_url} if target_url else {})})

    def close(self) -> None:
        self.log.close()

    def _record(self, action: str, pr: int | None, sha: str, payload: dict[str, Any],
                headline: str = "", kind: str = "") -> None:
        at = self.log.record(action, pr, sha, payload, headline, kind)
        if self.log_file is not None:
            line = {"at": at, "action": action, "pr": pr, "sha": sha, "headline": headline,
                    "kind": kind, **payload}
            with open(self.log_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(line, sort_keys=True) + "\n")
