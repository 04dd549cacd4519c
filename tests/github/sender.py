"""A local "phony": posts payloads to the webhook with a real HMAC signature, like GitHub does."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import requests

from evalbot.github.service import Running
from evalbot.github.webhook import signature
from evalbot.store.jobs import Store


class Sender:
    def __init__(self, url: str, secret: bytes) -> None:
        self.url, self.secret = url, secret
        self.http = requests.Session()

    def post(self, event: str, payload: Any, *, delivery: str | None = None,
             sign: bool = True, secret: bytes | None = None,
             raw: bytes | None = None) -> requests.Response:
        body = raw if raw is not None else json.dumps(payload).encode()
        headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
                   "Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/test",
                   "X-GitHub-Hook-Installation-Target-Type": "repository"}
        if sign:
            headers["X-Hub-Signature-256"] = signature(secret or self.secret, body)
        return self.http.post(self.url, data=body, headers=headers, timeout=10)


def settle(running: Running, count: int, timeout_s: float = 120.0) -> list[str]:
    """Wait until the dispatcher has handled `count` deliveries; returns its log lines."""
    deadline = time.monotonic() + timeout_s
    while len(running.dispatcher.done) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(running.dispatcher.done) >= count, running.dispatcher.done
    return running.dispatcher.done


def jobs(store: Store) -> list[tuple[int | None, str, str]]:
    """(PR, head, state) of every job, oldest first."""
    return [(j.pr, j.head_sha, j.state) for j in store.jobs()]
