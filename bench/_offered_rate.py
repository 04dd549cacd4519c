"""Intake at an offered rate: signed deliveries sent on a fixed schedule (open loop), as GitHub
sends them, whatever the answers' pace.

`evalbot serve` runs as its own process (waitress as shipped, the store in WAL mode; GitHub
requests unthrottled, so that the dispatcher, admitting 200 heads on the same two cores meanwhile,
drains in seconds rather than ten minutes) and the fake GitHub in another, so neither the client nor the
fake's OpenAPI checks share the service's interpreter. Each answer's latency counts from the
moment its delivery was due, not from when a client got round to sending it: a client that fell
behind adds its delay to the figure instead of hiding it (no coordinated omission). The box's
last health check failed on purpose, so no job is leased: the figure is the intake's.
"""

from __future__ import annotations

import http.client
import multiprocessing
import os
import secrets
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from evalbot.github.webhook import signature
from evalbot.store.health import Health, HealthStore

CLIENT_THREADS = 64  # enough that the schedule, not the client, sets the pace at 200/s


def _fake_process(conn: Connection) -> None:
    from bench.intake import fake_github

    fake = fake_github()
    conn.send((fake.api_url, fake.token))  # type: ignore[attr-defined]
    conn.recv()  # until the bench is done
    fake.close()


def _config(root: Path, api_url: str) -> Path:
    from tests.github.accounts import BOT
    from tests.github.fake_github import REPO

    path = root / "evalbot.yaml"
    path.write_text(f"profile: demo\nstore: {root / 'evalbot.sqlite3'}\ngithub:\n"
                    f"  repo: {REPO}\n  api_url: {api_url}\n  bot_login: \"{BOT}\"\n"
                    "  quota_per_author_per_day: 0\n  quota_per_pr_per_day: 0\n"
                    "service:\n  metrics_port: 0\n  aa_every_h: 0\nboxes:\n"
                    f"  - {{name: b, kind: local, workdir: {root / 'box'}, trusted: true, "
                    "unsandboxed: true}\n")
    health = HealthStore(root / "evalbot.sqlite3")
    health.record(Health("b", "demo", False, ("the intake bench measures the intake",), None))
    health.close()
    return path


def _plan(n: int, secret: bytes) -> list[tuple[str, bytes, str]]:
    """(delivery id, body, signature): 10 events per head, 10% redeliveries, signed ahead."""
    import json

    from tests.github import payloads
    from tests.github.accounts import MAINTAINER

    heads = [secrets.token_hex(20) for _ in range(max(1, n // 10))]
    bodies = {i + 1: json.dumps(payloads.pull_request(
        "synchronize", number=i + 1, head_sha=sha, author=MAINTAINER)).encode()
        for i, sha in enumerate(heads)}
    signed = {k: (b, signature(secret, b)) for k, b in bodies.items()}
    first = [(f"d{i}", i % len(heads) + 1) for i in range(n * 9 // 10)]
    plan = first + first[::9][: n - len(first)]
    return [(d, *signed[k]) for d, k in plan]


def _poster(port: int) -> Any:
    local = threading.local()

    def post(item: tuple[str, bytes, str], due: float) -> tuple[float, int]:
        delivery, body, sig = item
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/", body=body, headers={
            "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": sig, "Content-Type": "application/json"})
        answer = conn.getresponse()
        answer.read()
        return time.perf_counter() - due, answer.status
    return post


def offered(rate: float, n: int) -> dict[str, float]:
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    fake = ctx.Process(target=_fake_process, args=(child,), daemon=True)
    fake.start()
    api_url, token = parent.recv()
    with tempfile.TemporaryDirectory() as tmp:
        secret = secrets.token_hex(16)
        log = Path(tmp) / "serve.log"
        proc = subprocess.Popen([sys.executable, "-m", "evalbot", "serve", "--config",
                                 str(_config(Path(tmp), api_url)), "--port", "0",
                                 "--no-throttle"],
                                stdout=open(log, "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
                                env={**os.environ, "EVALBOT_GITHUB_TOKEN": token,
                                     "EVALBOT_WEBHOOK_SECRET": secret})
        try:
            result = _run(rate, n, proc, log, secret.encode(), Path(tmp) / "evalbot.sqlite3")
        finally:
            proc.terminate()
            proc.wait()
            parent.send("done")
            fake.join(timeout=30)
    return result


def _run(rate: float, n: int, proc: subprocess.Popen[bytes], log: Path, secret: bytes,
         store: Path) -> dict[str, float]:
    from bench.intake import serve_port, wait

    plan, post = _plan(n, secret), _poster(serve_port(proc, log))
    load_before, cpu_before = os.getloadavg()[0], _cpu_s(proc.pid)
    t0 = time.perf_counter() + 0.5
    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        futures = []
        for i, item in enumerate(plan):
            due = t0 + i / rate
            time.sleep(max(0.0, due - time.perf_counter()))
            futures.append(pool.submit(post, item, due))
        answers = [f.result() for f in futures]
    sent_s = time.perf_counter() - t0
    load_during = os.getloadavg()[0]

    def drained() -> bool:
        db = sqlite3.connect(store)
        try:
            return db.execute("SELECT COUNT(*) FROM inbox").fetchone()[0] == 0
        finally:
            db.close()
    wait("every delivery dispatched", drained)
    drained_s, cpu_s = time.perf_counter() - t0, _cpu_s(proc.pid) - cpu_before
    db = sqlite3.connect(store)
    jobs, heads = db.execute("SELECT COUNT(*), COUNT(DISTINCT head_sha) FROM jobs").fetchone()
    db.close()
    lat = sorted(s for s, _ in answers)
    return {"deliveries": len(plan), "accepted": sum(c in (200, 202) for _, c in answers),
            "offered_per_s": rate, "answered_per_s": len(plan) / sent_s,
            "p50_ms": 1000 * statistics.median(lat), "p99_ms": 1000 * lat[int(0.99 * len(lat))],
            "max_ms": 1000 * lat[-1], "drained_s": drained_s, "jobs": jobs, "heads": heads,
            "cpu_ms": 1000 * cpu_s / len(plan), "load_before": load_before,
            "load_during": load_during, "cores": os.cpu_count() or 0,
            "expected_heads": max(1, n // 10)}


def _cpu_s(pid: int) -> float:
    """CPU seconds the process has used (user + system), from /proc: what a delivery costs
    the service whatever else the machine runs."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
