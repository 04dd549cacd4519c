"""Webhook latency while slow clients hold connections open (a slowloris against the intake).

N clients each open a connection, send the headers of a 100 kB delivery and then dribble one
byte every 0.2 s; meanwhile real signed deliveries (the 24.7 KB `pull_request.synchronize`
example) are posted one after another. Printed: p50/p99/max of their answer time and how many
went unanswered within 10 s, with the shipped waitress settings (`webhook.SERVER_SETTINGS`) and
with waitress's defaults.

Usage: python bench/slow_clients.py [SLOW] [DELIVERIES]   (defaults 200, 200)
"""

from __future__ import annotations

import argparse
import logging
import secrets
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.intake import config_file, fake_github, pct  # noqa: E402
from evalbot.config.settings import load_config  # noqa: E402
from evalbot.github.pygithub_client import PyGithubPort  # noqa: E402
from evalbot.github.service import start  # noqa: E402
from evalbot.github.webhook import MAX_BODY, SERVER_SETTINGS  # noqa: E402
from tests.github import payloads  # noqa: E402
from tests.github.accounts import MAINTAINER, fast_backoff  # noqa: E402
from tests.github.fake_github import REPO  # noqa: E402
from tests.github.sender import Sender  # noqa: E402

WAITRESS_DEFAULTS = {"threads": 4, "max_request_body_size": MAX_BODY + 1}
TIMEOUT_S = 10.0  # tests.github.sender.Sender's, and what GitHub waits for an answer


def dribblers(port: int, count: int, stop: threading.Event) -> threading.Thread:
    socks = []
    for _ in range(count):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))  # beyond the server's limit they wait in the backlog
        socks.append(s)

    def dribble() -> None:
        started = [False] * len(socks)
        while not stop.wait(0.2):
            for i, s in enumerate(socks):
                data = b" " if started[i] else (b"POST / HTTP/1.1\r\nHost: bot\r\nContent-Type: "
                                                b"application/json\r\nContent-Length: 100000\r\n\r\n{")
                try:
                    s.send(data)
                    started[i] = True
                except OSError:
                    pass
        for s in socks:
            s.close()

    thread = threading.Thread(target=dribble, daemon=True)
    thread.start()
    return thread


def measure(settings: dict[str, object], slow: int, deliveries: int) -> tuple[list[float], int]:
    fake = fake_github()
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(config_file(Path(tmp), fake, f"{{name: b, kind: local, workdir: "
                                                           f"{tmp}/box, trusted: true}}"))
        port = PyGithubPort(REPO, fake.token, fake.api_url, throttle=False)  # type: ignore[attr-defined]
        secret = secrets.token_bytes(32)
        running = start(config, secret, port, backoff=fast_backoff(), server_settings=settings)
        stop = threading.Event()
        thread = dribblers(running.port, slow, stop)
        time.sleep(1.0)  # let the slow clients take their connections first
        send = Sender(f"http://127.0.0.1:{running.port}/", secret)
        send.http = requests.Session()
        times, lost = [], 0
        for i in range(deliveries):
            body = payloads.pull_request("synchronize", number=2 + i % 50, head_sha=f"{i:040x}",
                                         author=MAINTAINER)
            t0 = time.perf_counter()
            try:
                send.post("pull_request", body)
                times.append(time.perf_counter() - t0)
            except requests.RequestException:
                lost += 1
            send.http.close()  # a new connection each time, as GitHub's deliveries come
            if lost >= 5:
                break  # the point is made; don't wait 8 s for each of the rest
        stop.set()
        thread.join(timeout=10)
        running.stop()
    fake.close()
    return times, lost


def main() -> None:
    logging.disable(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("slow", nargs="?", type=int, default=200, help="slow clients (200)")
    parser.add_argument("deliveries", nargs="?", type=int, default=200,
                        help="real deliveries posted meanwhile (200)")
    args = parser.parse_args()
    if args.slow < 0 or args.deliveries < 1:
        parser.error("slow must be 0 or more and deliveries at least 1")
    slow, deliveries = args.slow, args.deliveries
    print(f"{slow} slow clients dribbling a body; real deliveries one after another, "
          f"{TIMEOUT_S:.0f} s client timeout\n")
    print("| waitress settings | answered | unanswered | p50 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, settings in (("shipped (webhook.SERVER_SETTINGS)", SERVER_SETTINGS),
                           ("waitress defaults", WAITRESS_DEFAULTS)):
        times, lost = measure(settings, slow, deliveries)
        ms = [t * 1000 for t in times] or [float("nan")]
        print(f"| {name} | {len(times)} | {lost} | {pct(ms, 0.5):.1f} | {pct(ms, 0.99):.1f} | "
              f"{max(ms):.1f} |")


if __name__ == "__main__":
    main()
