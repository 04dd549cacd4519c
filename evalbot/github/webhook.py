"""The webhook endpoint: verify, de-duplicate, record, answer. Nothing slow happens here.

A WSGI app served by waitress (a production server). A delivery is checked (size, HMAC over the
raw body, content type application/json, JSON, a handled event with well-typed fields) and
stored in the SQLite inbox together with its delivery id in one transaction, shared with the
deliveries that arrived meanwhile (evalbot.github.inbox_writer: one fsync for a burst); the 202
waits for it. The dispatcher thread does everything that talks to GitHub.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from evalbot.github.events import PayloadError, parse_delivery
from evalbot.github.inbox_writer import InboxWriter

MAX_BODY = 5 * 1024 * 1024  # GitHub caps payloads at 25 MB; ours are far smaller
# waitress reads request bodies on its event loop and hands only complete requests to its
# threads, so a client dribbling a body holds a connection slot, not a thread. Enough slots
# that a few hundred slow clients leave room for GitHub (bench/slow_clients.py), poll() rather
# than select() (no 1024-descriptor ceiling), and a connection silent for 30 s is closed. A
# thread spends most of a delivery waiting for its commit's fsync (inbox_writer.py): 16 of them
# keep a burst's deliveries in one commit instead of queued for a thread (bench/intake.py
# --rate 200: p99 52 and 122 ms with 16, 822 and 360 ms with 4, back to back on a loaded host).
SERVER_SETTINGS: dict[str, Any] = {"threads": 16, "connection_limit": 1000, "channel_timeout": 30,
                                   "cleanup_interval": 10, "asyncore_use_poll": True,
                                   "max_request_body_size": MAX_BODY + 1}
StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def signature(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(secret: bytes, body: bytes, header: str | None) -> bool:
    """Constant-time compare of X-Hub-Signature-256 over the raw bytes (GitHub's docs)."""
    return bool(header) and hmac.compare_digest(signature(secret, body), str(header))


class WebhookApp:
    def __init__(self, secret: bytes | Callable[[], Sequence[bytes]], store_path: str,
                 wake: threading.Event | None = None, max_body: int = MAX_BODY,
                 alive: Callable[[], bool] = lambda: True) -> None:
        # A callable gives the secrets accepted right now (evalbot/service/secrets_rotation.py: the new
        # one and, for a window, the old one), asked at every delivery.
        self.accepted = (lambda: [secret]) if isinstance(secret, bytes) else secret
        if not self.accepted() or not all(self.accepted()):
            raise ValueError("a webhook secret is required: unsigned deliveries are refused")
        self.store_path, self.max_body = store_path, max_body
        self.wake = wake or threading.Event()
        # Whether the dispatcher still runs: a 202 promises the delivery will be handled, so a
        # dead dispatcher turns deliveries away (503) and GitHub shows them as failed.
        self.alive = alive
        self.inbox = InboxWriter(Path(store_path))  # group commit: one fsync for a burst

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        status, text = self.respond(environ)
        body = (text + "\n").encode()
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                                ("Content-Length", str(len(body)))])
        return [body]

    def respond(self, environ: dict[str, Any]) -> tuple[str, str]:
        if environ.get("REQUEST_METHOD") != "POST":
            return "405 Method Not Allowed", "POST webhook deliveries here"
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return "400 Bad Request", "invalid Content-Length"
        if length > self.max_body:
            return "413 Payload Too Large", f"body over {self.max_body} bytes"
        body = environ["wsgi.input"].read(length) if length else b""
        header = environ.get("HTTP_X_HUB_SIGNATURE_256")
        if not any([verify(s, body, header) for s in self.accepted()]):  # all compared: no hint
            return "401 Unauthorized", "missing or wrong X-Hub-Signature-256"
        if not self.alive():
            return "503 Service Unavailable", "the dispatcher is not running; not accepting " \
                                              "deliveries it cannot handle"
        media = str(environ.get("CONTENT_TYPE") or "").split(";")[0].strip().lower()
        if media != "application/json":  # after the HMAC: only GitHub learns how to fix it
            return "415 Unsupported Media Type", (
                f"content type {media or '(none)'} is not application/json: set the webhook's "
                "\"Content type\" to application/json (repository Settings > Webhooks)")
        event = environ.get("HTTP_X_GITHUB_EVENT", "")
        delivery = environ.get("HTTP_X_GITHUB_DELIVERY", "")
        if not event or not delivery:
            return "400 Bad Request", "X-GitHub-Event and X-GitHub-Delivery are required"
        try:
            parsed = parse_delivery(event, body)
        except PayloadError as exc:  # first: a ValueError too
            return "400 Bad Request", str(exc)
        except (ValueError, RecursionError):  # RecursionError: nested too deeply
            return "400 Bad Request", "body is not valid JSON (or nested too deeply)"
        if parsed is None:
            return "204 No Content", ""
        if not self.inbox.put(delivery, event, body, f"{parsed.repo}#{parsed.number}"):
            return "200 OK", f"delivery {delivery} already received"
        self.wake.set()
        return "202 Accepted", f"delivery {delivery} queued"
