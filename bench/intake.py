"""The service's intake and turnaround on this machine, against the local fake GitHub.

1. Intake: a concurrent burst of signed deliveries (10% redeliveries) to the running service
   (waitress webhook + dispatcher + SQLite inbox): deliveries accepted per second, p50/p99 of
   the time to the HTTP answer, and how long the dispatcher took to turn them into jobs.
2. Turnaround: `evalbot serve` as its own process on the demo engine (local box); one push
   webhook -> the verdict in the PR's sticky comment and the commit status.

The demo box is a local one running PR code as this user, so it says `unsandboxed: true`
(serve refuses a box with neither `sandbox_user` nor that). Every wait has a deadline: a bench
that breaks exits non-zero with the reason instead of hanging.

3. With --rate R: deliveries offered at R per second (open loop) to `evalbot serve` as its own
   process (bench/_offered_rate.py): p50/p99/max answer latency counted from each delivery's due
   time, with the machine's load average, instead of 1 and 2.

Usage: python bench/intake.py [DELIVERIES] [CLIENTS]   (defaults 1000, 16)
       python bench/intake.py --short                  (100 deliveries, 4 clients, the
                                                        demo profile's decode@64: CI's check)
       python bench/intake.py --rate 200 [DELIVERIES]  (default 2000: ten seconds at 200/s)
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evalbot.config.settings import load_config  # noqa: E402
from evalbot.engine.demo import generate  # noqa: E402
from evalbot.github.pygithub_client import PyGithubPort  # noqa: E402
from evalbot.github.service import start  # noqa: E402
from evalbot.store.jobs import Store  # noqa: E402
from tests.demo_profile import cut_demo_profile  # noqa: E402
from tests.github import payloads  # noqa: E402
from tests.github.accounts import BOT, MAINTAINER, fast_backoff  # noqa: E402
from tests.github.fake_github import REPO, FakeGitHub  # noqa: E402
from tests.github.sender import Sender  # noqa: E402


def fake_github() -> FakeGitHub:
    fake = FakeGitHub()
    fake.token = "ghs_" + secrets.token_hex(18)  # type: ignore[attr-defined]
    fake.add_user(BOT, "write", fake.token)  # type: ignore[attr-defined]
    fake.add_user(MAINTAINER, "admin")
    return fake


def config_file(root: Path, fake: FakeGitHub, box: str, profile: str = "demo") -> Path:
    path = root / "evalbot.yaml"
    path.write_text(f"profile: {profile}\nstore: {root / 'evalbot.sqlite3'}\ngithub:\n"
                    f"  repo: {REPO}\n  api_url: {fake.api_url}\n  bot_login: \"{BOT}\"\n"
                    "  quota_per_author_per_day: 0\n  quota_per_pr_per_day: 0\nboxes:\n"
                    f"  - {box}\n")
    return path


DEADLINE_S = 600.0


def wait(what: str, ready: object, deadline_s: float = DEADLINE_S) -> None:
    """Poll `ready` (a callable) until true; exit non-zero naming `what` at the deadline."""
    end = time.monotonic() + deadline_s
    while not ready():  # type: ignore[operator]
        if time.monotonic() > end:
            raise SystemExit(f"bench/intake.py: {what} not reached in {deadline_s:.0f} s")
        time.sleep(0.05)


def serve_port(proc: subprocess.Popen[bytes], log: Path) -> int:
    """The webhook port `evalbot serve` printed (its output goes to `log`)."""
    def listening() -> re.Match[str] | None:
        if proc.poll() is not None:
            raise SystemExit("serve exited:\n" + log.read_text()[-3000:])
        return re.search(r"webhook on 127.0.0.1:(\d+)", log.read_text())
    wait("serve listening", listening, 120.0)
    found = listening()
    assert found is not None
    return int(found.group(1))


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def intake(n: int, clients: int) -> dict[str, float]:
    fake = fake_github()
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(config_file(Path(tmp), fake, f"{{name: b, kind: local, workdir: "
                                                          f"{tmp}/box, trusted: true, "
                                                          "unsandboxed: true}"))
        secret = secrets.token_bytes(32)
        port = PyGithubPort(REPO, fake.token, fake.api_url, throttle=False)  # type: ignore[attr-defined]
        running = start(config, secret, port, backoff=fast_backoff())
        send = [Sender(f"http://127.0.0.1:{running.port}/", secret) for _ in range(clients)]
        heads = [secrets.token_hex(20) for _ in range(max(1, n // 10))]  # 10 events per head
        plan = [(f"d{i}", i % len(heads) + 1, heads[i % len(heads)]) for i in range(n * 9 // 10)]
        plan += plan[:: 9][: n - len(plan)]  # redeliveries: the same delivery id again
        bodies = {number: payloads.pull_request("synchronize", number=number, head_sha=sha,
                                                author=MAINTAINER) for _, number, sha in plan}

        def post(i: int) -> tuple[float, int]:
            delivery, number, _sha = plan[i]
            t0 = time.perf_counter()
            code = send[i % clients].post("pull_request", bodies[number],
                                          delivery=delivery).status_code
            return time.perf_counter() - t0, code

        t0 = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            answers = list(pool.map(post, range(len(plan))))
        burst_s = time.perf_counter() - t0
        accepted = sum(1 for _, code in answers if code in (200, 202))
        wait("every delivery dispatched", lambda: len(running.dispatcher.done) >= n * 9 // 10)
        drained_s = time.perf_counter() - t0
        jobs = len(Store(config.store).jobs())
        running.stop()
    fake.close()
    lat = [s for s, _ in answers]
    return {"deliveries": len(plan), "accepted": accepted, "per_s": accepted / burst_s,
            "p50_ms": 1000 * statistics.median(lat), "p99_ms": 1000 * pct(lat, 0.99),
            "drained_s": drained_s, "jobs": jobs, "heads": len(heads)}


def turnaround(pr: str = "faster", cut: bool = False) -> dict[str, float | str]:
    """The shipped demo profile, or with `cut` its decode@64 cell alone (tests/demo_profile.py:
    the same looks, floors, budget, witness and correctness; a third of the box time)."""
    fake = fake_github()
    with tempfile.TemporaryDirectory() as tmp:
        demo = generate(Path(tmp) / "demo")
        box = (f"{{name: local, kind: local, workdir: {tmp}/box, repo: {demo.path}, "
               f"models_dir: {demo.model_path.parent}, python: {sys.executable}, trusted: true, "
               "unsandboxed: true}")
        profile = str(cut_demo_profile(Path(tmp) / "profile")) if cut else "demo"
        path = config_file(Path(tmp), fake, box, profile)
        secret, log = secrets.token_hex(16), Path(tmp) / "serve.log"
        env = {**os.environ, "EVALBOT_GITHUB_TOKEN": fake.token,  # type: ignore[attr-defined]
               "EVALBOT_WEBHOOK_SECRET": secret}
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "evalbot", "serve", "--config",
                                     str(path), "--port", "0", "--no-throttle"], stdout=out,
                                    stderr=subprocess.STDOUT, env=env)
        try:
            send = Sender(f"http://127.0.0.1:{serve_port(proc, log)}/", secret.encode())
            head = demo.prs[pr]
            t0 = time.perf_counter()
            send.post("pull_request", payloads.pull_request(
                "synchronize", number=1, head_sha=head, base_sha=demo.main_sha,
                author=MAINTAINER))
            pending = verdict = 0.0
            end = time.monotonic() + DEADLINE_S
            while not verdict:
                if time.monotonic() > end:
                    raise SystemExit("bench/intake.py: no verdict published:\n"
                                     + log.read_text()[-3000:])
                states = [s["state"] for s in fake.state.statuses.get(head, [])]
                pending = pending or (time.perf_counter() - t0 if states else 0.0)
                verdict = time.perf_counter() - t0 if states and states[-1] != "pending" else 0.0
                if proc.poll() is not None:
                    raise SystemExit(log.read_text()[-3000:])
                time.sleep(0.1)
            [comment] = [c for c in fake.comments_on(1) if c["author"] == BOT]
            final = fake.state.statuses[head][-1]["description"]  # "eval:M ...", as in the comment
            headline = re.match(r"(eval:\w+)", final)
            if headline and headline.group(1) not in comment["body"]:
                headline = None
        finally:
            proc.terminate()
            proc.wait()
    fake.close()
    return {"pending_s": pending, "verdict_s": verdict,
            "headline": headline.group(1) if headline else "?"}


def main() -> None:
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("deliveries", nargs="?", type=int, help="default 1000 (--short: 100)")
    parser.add_argument("clients", nargs="?", type=int, help="default 16 (--short: 4)")
    parser.add_argument("--short", action="store_true", help="CI's check: 100 deliveries, 4 clients")
    parser.add_argument("--rate", type=float, default=None,
                        help="offer deliveries at this many per second (open loop) instead")
    args = parser.parse_args()
    if args.rate is not None:
        return print_offered(args.rate, args.deliveries or 2000)
    n = args.deliveries if args.deliveries is not None else (100 if args.short else 1000)
    clients = args.clients if args.clients is not None else (4 if args.short else 16)
    if n < 1 or clients < 1:
        parser.error("deliveries and clients must be at least 1")
    r = intake(n, clients)
    print(f"{'intake (webhook + dispatcher + fake GitHub)':<46}{'value':>12}")
    print(f"{'deliveries sent (10% redeliveries)':<46}{r['deliveries']:>12.0f}")
    print(f"{'answered 200/202':<46}{r['accepted']:>12.0f}")
    print(f"{'accepted per second (' + str(clients) + ' clients)':<46}{r['per_s']:>12.1f}")
    print(f"{'answer latency p50 (ms)':<46}{r['p50_ms']:>12.1f}")
    print(f"{'answer latency p99 (ms)':<46}{r['p99_ms']:>12.1f}")
    print(f"{'burst start -> all deliveries dispatched (s)':<46}{r['drained_s']:>12.1f}")
    print(f"{'jobs created / distinct heads':<46}{r['jobs']:>6.0f} / {r['heads']:<4.0f}")
    # --short checks that the bench runs, not its figures: the same `faster` PR through serve,
    # its measuring and its witness, under the demo profile cut to its decode@64 cell (45 s on a
    # busy 2-core machine, where the whole profile's slow_long took 92 s and its faster more).
    t = turnaround("faster", cut=args.short)
    print(f"{'demo engine: webhook -> pending status (s)':<46}{t['pending_s']:>12.1f}")
    print(f"{'demo engine: webhook -> verdict published (s)':<46}{t['verdict_s']:>12.1f}")
    print(f"{'demo engine: published headline':<46}{t['headline']:>12}")
    broken = [why for why, bad in (("a delivery was refused", r["accepted"] < r["deliveries"]),
                                   ("not one job per head", r["jobs"] != r["heads"]),
                                   ("no headline published", t["headline"] == "?")) if bad]
    if broken:
        raise SystemExit("bench/intake.py: " + "; ".join(broken))


def print_offered(rate: float, n: int) -> None:
    from bench._offered_rate import offered

    if rate <= 0 or n < 1:
        raise SystemExit("bench/intake.py: --rate and DELIVERIES must be positive")
    r = offered(rate, n)
    print(f"{'intake at an offered rate (evalbot serve)':<46}{'value':>12}")
    print(f"{'machine: cores / load average before, during':<46}"
          f"{r['cores']:>4.0f} /{r['load_before']:>5.1f},{r['load_during']:>5.1f}")
    print(f"{'deliveries offered (10% redeliveries)':<46}{r['deliveries']:>12.0f}")
    print(f"{'offered per second':<46}{r['offered_per_s']:>12.1f}")
    print(f"{'answered per second':<46}{r['answered_per_s']:>12.1f}")
    print(f"{'answered 200/202':<46}{r['accepted']:>12.0f}")
    print(f"{'answer latency from due time p50 (ms)':<46}{r['p50_ms']:>12.1f}")
    print(f"{'answer latency from due time p99 (ms)':<46}{r['p99_ms']:>12.1f}")
    print(f"{'answer latency from due time max (ms)':<46}{r['max_ms']:>12.1f}")
    print(f"{'first due -> all deliveries dispatched (s)':<46}{r['drained_s']:>12.1f}")
    print(f"{'serve CPU per delivery, intake + dispatch (ms)':<46}{r['cpu_ms']:>12.2f}")
    print(f"{'jobs created / distinct heads':<46}{r['jobs']:>6.0f} / {r['expected_heads']:<4.0f}")
    broken = [why for why, bad in (("a delivery was refused", r["accepted"] < r["deliveries"]),
                                   ("not one job per head", r["jobs"] != r["expected_heads"]))
              if bad]
    if broken:
        raise SystemExit("bench/intake.py: " + "; ".join(broken))


if __name__ == "__main__":
    main()
