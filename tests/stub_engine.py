"""A tiny engine repository for harness tests: a Python script, no torch, effects set per commit.

Each commit carries `speed.json` (rate per metric, multiplied by a seeded noise factor) and may
break the build, crash, hang or lie about its speed, so every failure path of the harness can be
driven through the real harness code.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

# evalbot's stepped witness protocol as a stub (engine/contract/witness_spec.py): it "loads",
# says READY, reads the prompt line, then answers each id fed to it; each answer is CPU work at
# the given pace (so the CPU clock sees it whatever else the machine runs) and an id that
# depends on every id so far (a head that skips a step cannot know it).
WITNESS = r'''
def witness(step_s, prompt_s=0.0):
    import sys, time
    def burn(seconds):
        end = time.process_time() + seconds
        while time.process_time() < end:
            pass
    print("EVALBOT_READY", flush=True)
    prompt = [int(t) for t in sys.stdin.readline().split()]
    burn(prompt_s)
    last = sum(prompt) % 1000
    print(f"EVALBOT_STEP {last}", flush=True)
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        burn(step_s)
        last = (int(line) * 7 + last) % 1000
        print(f"EVALBOT_STEP {last}", flush=True)
'''
ENGINE = WITNESS + r'''
import json, random, sys, time
args = sys.argv[1:]
cfg = json.load(open(__file__.replace("engine.py", "speed.json")))
if cfg.get("crash"):
    sys.exit(3)
if cfg.get("hang"):
    time.sleep(3600)
if "--witness" in args:  # the true work: a 16-id prompt, then one decode step per id
    witness(1 / cfg["decode"], 16 / cfg["prefill"])
ctxs = [int(c) for c in args[args.index("--ctxs") + 1].split(",")]
rng = random.Random()
out = {}
for ctx in ctxs:
    # The work takes the time its true rates, with this process's noise, say (32 decode
    # tokens, a ctx-token prefill): an honest report never claims more work than was done. A
    # liar reports faster rates for the same work.
    noise = 1 + rng.gauss(0, cfg.get("noise", 0.002))
    time.sleep(cfg.get("work_s", 0.002) + (32 / cfg["decode"] + ctx / cfg["prefill"]) / noise)
    out[str(ctx)] = {"decode_tps": cfg["decode"] * noise * cfg.get("lie", 1),
                     "prefill_tps": cfg["prefill"] * noise * cfg.get("lie", 1)}
print("BENCH_JSON " + json.dumps(out))
'''
BUILD = r'''
import json, shutil, sys
from pathlib import Path
cfg = json.load(open("speed.json"))
if cfg.get("build_fails"):
    print(cfg.get("message", "error: does not compile"), file=sys.stderr)
    sys.exit(2)
Path("build").mkdir(exist_ok=True)
shutil.copy("engine.py", "build/engine.py")
shutil.copy("speed.json", "build/speed.json")
'''
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t.invalid", "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_CONFIG_NOSYSTEM": "1"}


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def make_repo(root: Path, variants: dict[str, dict[str, object]],
              main: dict[str, object] | None = None) -> tuple[Path, str, dict[str, str]]:
    """A repo with a main commit and one commit per variant on top of main; returns the SHAs."""
    repo = root / "engine-repo"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "engine.py").write_text(ENGINE)
    (repo / "build.py").write_text(BUILD)
    base_cfg = {"decode": 1000.0, "prefill": 1e6, **(main or {})}
    (repo / "speed.json").write_text(json.dumps(base_cfg))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "main")
    main_sha = _git(repo, "rev-parse", "HEAD")
    shas = {}
    for name, change in variants.items():
        _git(repo, "checkout", "-q", "--detach", main_sha)
        (repo / "speed.json").write_text(json.dumps({**base_cfg, **change}))
        _git(repo, "commit", "-q", "--allow-empty", "-am", name)
        shas[name] = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "main")
    return repo, main_sha, shas


def decode_cell(base_rate: float, head_rate: float, n: int = 6) -> dict[str, object]:
    """A results cell of the stub's decode@128 with n pairs at constant printed rates (for the
    confirmation's table tests)."""
    samples = []
    for p in range(n):
        samples += [{"pair": p, "side": "base", "value": base_rate, "dropped": False},
                    {"pair": p, "side": "head", "value": head_rate, "dropped": False}]
    return {"model": "m", "metric": "decode", "ctx": 128, "higher_is_better": True,
            "samples": samples}


def decode_witness(new_tokens: int = 256, pairs: int = 4) -> dict[str, object]:
    """A witness for the stub's decode@128 cell: `new_tokens` steps of true decode work fed one
    at a time (CPU-bound, so its CPU time is the work's, whatever the machine runs beside it)."""
    return stepped_witness("decode-128", "m/decode@128", new_tokens, pairs)


def stepped_witness(name: str, cell: str, steps: int, pairs: int | list[int],
                    argv: tuple[str, ...] = ("{python}", "{build}/build/engine.py", "--witness"),
                    clock: str = "cpu") -> dict[str, object]:
    """The contract's form of a stub's stepped witness (WITNESS above) crediting `steps` decode
    tokens of `cell`."""
    return {"name": name, "argv": list(argv), "cells": {cell: steps}, "prompt_tokens": 16,
            "steps": steps, "output": {"kind": "step_lines"}, "output_tokens": steps + 1,
            "pairs": pairs, "min_agreement": 1.0, "clock": clock}


def job_doc(repo: Path, base: str, head: str, *, looks: list[int] | None = None,
            critical: list[float] | None = None, cells: list[tuple[str, int]] | None = None,
            timeout_s: float = 60.0, sd_floor: float = 0.001,
            witnesses: list[dict[str, object]] | None = None) -> dict[str, object]:
    """A job description for the stub engine, in the contract's JSON form; by default with the
    decode@128 witness when that cell is measured (the only way a cell earns a tier)."""
    from evalbot.grading.sequential import critical_values

    looks = looks or [3, 5]
    cells = cells or [("decode", 128), ("prefill", 4096)]
    if witnesses is None:
        witnesses = [decode_witness()] if ("decode", 128) in cells else []
    critical = critical or critical_values(looks, len(cells), 0.05)
    return {
        "schema": "evalbot.job/1", "job_id": "stubjob", "profile": "stub", "repo": str(repo),
        "base_sha": base, "head_sha": head, "build_argv": ["{python}", "build.py"],
        "build_timeout_s": 60.0, "artifacts": ["build/engine.py", "build/speed.json"],
        "models": [{"name": "m", "path": "/dev/null", "sha256": "0" * 64, "role": "primary",
                    "namespace": "eval-m"}],
        "runs": [{"model": "m", "argv": ["{python}", "{build}/build/engine.py", "--ctxs", "{ctxs}"],
                  "parse": {"kind": "json_line", "prefix": "BENCH_JSON ",
                            "fields": {"decode": "{ctx}.decode_tps",
                                       "prefill": "{ctx}.prefill_tps"}},
                  "cells": [{"model": "m", "metric": m, "ctx": c} for m, c in cells],
                  "timeout_s": timeout_s, "tokens_per_sample": {"decode": 32},
                  "witnesses": witnesses}],
        "rule": {"looks": looks, "critical": critical,
                 "sd_floor": sd_floor, "significance": 0.02, "tolerance": 0.02, "warmup": 1,
                 "budget_s": 600.0, "alpha": 0.05,
                 # the stub's samples are tiny processes beside its witness's decode: its tests
                 # are of the confirmation, not of its box-time share (tests/test_witness_box_time.py)
                 "witness_share": 10.0},
        "correctness": None,
    }
