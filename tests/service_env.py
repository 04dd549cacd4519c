"""What the service tests share: a stub-engine profile, a config with N local boxes, and the
`evalbot serve` / `evalbot worker` processes (real processes, real SQLite file)."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from evalbot.config.settings import Config, load_config
from evalbot.store.jobs import Store
from tests.github.sender import Sender

T = TypeVar("T")

PROFILE = """
name: stub
build:
  argv: ["{{python}}", "build.py"]
  timeout_s: 60
  artifacts: [build/engine.py, build/speed.json]
box_labels: [{labels}]
models:
  - {{name: m, file: {model}, sha256: {sha}, role: primary, namespace: eval-m}}
speed:
  looks: [3, 5]
  warmup: 1
  sd_floor: 0.001
  budget_s: 600
  witness_share: 10   # the stub's samples are tiny beside its witness (tests/test_witness_box_time.py)
  runs:
    - model: m
      argv: ["{{python}}", "{{build}}/build/engine.py", "--ctxs", "{{ctxs}}"]
      parse: {{kind: json_line, prefix: "BENCH_JSON ",
              fields: {{decode: "{{ctx}}.decode_tps", prefill: "{{ctx}}.prefill_tps"}}}}
      decode_tokens: 1
      timeout_s: 60
      cells:
        - {{metric: decode, ctx: 128}}
        - {{metric: prefill, ctx: 4096}}
      # tests/stub_engine.py's witness mode: 512 steps of CPU-bound decode, fed one at a time.
      # A busy machine's scatter left a CI run's `faster` unconfirmed at 4 pairs: such a box
      # measures on to 8.
      witnesses:
        - {{name: decode-128, argv: ["{{python}}", "{{build}}/build/engine.py", "--witness"],
           prompt_tokens: 16, steps: 512, output: {{kind: step_lines}}, output_tokens: 513,
           cells: {{"decode@128": 512}}, pairs: [4, 8], min_agreement: 1.0, clock: cpu}}
"""


def write_config(root: Path, repo: Path, *, boxes: int = 1, github: str = "",
                 labels: tuple[str, ...] = (), box_labels: tuple[tuple[str, ...], ...] = (),
                 trusted: bool = True) -> Config:
    """A profile for the stub engine and a config with `boxes` local boxes."""
    root.mkdir(parents=True, exist_ok=True)
    model = root / "model.bin"
    model.write_bytes(b"stub model weights")
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    profile = root / "stub.yaml"
    profile.write_text(PROFILE.format(model=model, sha=sha, labels=", ".join(labels)))
    lines = []
    for i in range(boxes):
        tags = box_labels[i] if i < len(box_labels) else labels
        lines.append(f"  - {{name: box-{i}, kind: local, workdir: {root / f'box-{i}'}, "
                     f"repo: {repo}, python: {sys.executable}, trusted: {str(trusted).lower()},"
                     " unsandboxed: true,"
                     f" labels: [{', '.join(tags)}]}}")
    path = root / "evalbot.yaml"
    path.write_text(f"profile: {profile}\nstore: {root / 'evalbot.sqlite3'}\n{github}"
                    "boxes:\n" + "\n".join(lines) + "\n")
    return load_config(path)


def evalbot(*args: str, env: dict[str, str] | None = None, log: Path | None = None
            ) -> subprocess.Popen[bytes]:
    """`evalbot ARGS` as its own process, output to `log`."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 (closed with the process)
    return subprocess.Popen([sys.executable, "-m", "evalbot", *args], stdout=out,
                            stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                            start_new_session=True)


def wait_for(what: str, check: Callable[[], T], timeout_s: float = 45.0,
             proc: subprocess.Popen[bytes] | None = None, log: Path | None = None) -> T:
    """Wait on a state (never a fixed sleep), returning check's first truthy value; the
    deadline is for a stuck service only."""
    deadline = time.monotonic() + timeout_s
    while not (got := check()):
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"evalbot exited {proc.returncode} while waiting for {what}: "
                                 + (log.read_text()[-3000:] if log else ""))
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: "
                                 + (log.read_text()[-3000:] if log else ""))
        time.sleep(0.05)
    return got


def job_states(config: Config) -> list[str]:
    store = Store(config.store)
    try:
        return [j.state for j in store.jobs()]
    finally:
        store.close()


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Service:
    """`evalbot serve` (or `evalbot worker`) as a process that can be killed and started again
    on the same store, with the token `token` for the fake GitHub and quick test settings."""

    MARK = "evalbot serve: webhook on 127.0.0.1:"

    def __init__(self, config: Config, token: str, root: Path, command: str = "serve",
                 args: tuple[str, ...] = ()) -> None:
        self.config, self.root, self.command, self.args = config, root, command, args
        self.secret = secrets.token_hex(16)
        self.env = {"EVALBOT_GITHUB_TOKEN": token, "EVALBOT_WEBHOOK_SECRET": self.secret}
        self.log = root / f"{command}.log"
        self.log.touch()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> Sender:
        """Started; for `serve`, once its webhook listens (the Sender posts to it)."""
        self.starts += 1
        extra = ("--port", "0") if self.command == "serve" else ()
        self.proc = evalbot(self.command, "--config", str(self.config.source), *extra,
                            "--lease-ttl", "2", "--retry-backoff", "0.5", "--poll", "0.1",
                            "--no-throttle", *self.args, env=self.env, log=self.log)
        if self.command != "serve":
            return Sender("http://127.0.0.1:9/", self.secret.encode())  # a worker has no webhook
        wait_for("the service to listen", lambda: self.log.read_text().count(self.MARK)
                 >= self.starts, proc=self.proc, log=self.log)
        port = re.findall(rf"{re.escape(self.MARK)}(\d+)", self.log.read_text())[-1]
        return Sender(f"http://127.0.0.1:{port}/", self.secret.encode())

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the process and wait for it to end (SIGKILL: it gets no chance to clean up)."""
        assert self.proc is not None
        os.kill(self.proc.pid, sig)
        self.proc.wait(timeout=60)

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)
