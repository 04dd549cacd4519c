"""Webhook intake on this machine: signed deliveries posted to the waitress server over loopback.

Measures what GitHub waits for: verify HMAC, parse, de-duplicate and record in SQLite, answer.
Usage: python bench/webhook_intake.py [N]   (needs tests/.npm from .ci/setup-github-data)
"""

from __future__ import annotations

import json
import logging
import secrets
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
from waitress.server import create_server

from evalbot.github.webhook import MAX_BODY, WebhookApp, signature

ROOT = Path(__file__).resolve().parent.parent


def payload() -> bytes:
    examples = json.loads((ROOT / "tests/.npm/webhook-examples.json").read_text())
    [pr] = [e for e in examples if e["name"] == "pull_request"]
    sync = next(x for x in pr["examples"] if x["action"] == "synchronize")
    return json.dumps(sync).encode()


def post(session: requests.Session, url: str, secret: bytes, body: bytes) -> float:
    headers = {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": str(uuid.uuid4()),
               "X-Hub-Signature-256": signature(secret, body)}
    started = time.perf_counter()
    r = session.post(url, data=body, headers=headers, timeout=10)
    elapsed = time.perf_counter() - started
    if r.status_code != 202:
        raise SystemExit(f"unexpected {r.status_code}: {r.text}")
    return elapsed


def run(n: int, clients: int, url: str, secret: bytes, body: bytes) -> tuple[list[float], float]:
    sessions = [requests.Session() for _ in range(clients)]
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        lat = list(pool.map(lambda i: post(sessions[i % clients], url, secret, body), range(n)))
    return lat, time.perf_counter() - started


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # queue-depth notes: noise here
    secret, body = secrets.token_bytes(32), payload()
    with tempfile.TemporaryDirectory() as tmp:
        app = WebhookApp(secret, str(Path(tmp) / "bench.sqlite3"))
        server = create_server(app, host="127.0.0.1", port=0, threads=4,
                               max_request_body_size=MAX_BODY + 1)
        threading.Thread(target=server.run, daemon=True).start()
        url = f"http://127.0.0.1:{server.effective_port}/"
        print(f"payload: pull_request.synchronize example, {len(body):,} bytes; {n} deliveries")
        print(f"{'clients':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'deliveries/s':>13}")
        for clients in (1, 4):
            lat, wall = run(n, clients, url, secret, body)
            q = statistics.quantiles(lat, n=100)
            print(f"{clients:>7} {1000 * q[49]:>8.2f} {1000 * q[98]:>8.2f} "
                  f"{1000 * max(lat):>8.2f} {n / wall:>13.0f}")
        server.close()


if __name__ == "__main__":
    main()
