"""evalbot-sparkinfer-witness on the GPU box, through the harness's own handoff clock
(engine.sandbox.proc.run with engine.measure.witness.handoff_of, a spec parsed by the contract).

    python3 scripts/gpu_sparkinfer_witness.py reps TOOL MODEL MODE A N --reps K --out F [--ctxs L]
        K processes on fresh ids (the harness's draw: `secrets`, [0, 1000)); one JSON line per
        process in F: handoff_s, wall_s, the STEP ids' digest, the tool's `witness-timing:`.
    python3 scripts/gpu_sparkinfer_witness.py fixed TOOL MODEL MODE A N --ids FILE --out F
        one process on given ids (FILE: the prompt's line, then one line per step); prints and
        writes its STEP ids (for the agreement checks against the engine's own tools).
    python3 scripts/gpu_sparkinfer_witness.py compare STEPS SCORE_LOG FIRST_POS
        agreement of the STEP ids with qwen3_gguf_score's argmaxes (`am=`) from position
        FIRST_POS on (the score teacher-forces through forward_token: the token path).
    python3 scripts/gpu_sparkinfer_witness.py same STEPS_A STEPS_B
        agreement of two transcripts' STEP ids (an A/A of one build, or two numerics).
    python3 scripts/gpu_sparkinfer_witness.py fill-ids D N_PROMPT_AND_STEPS [--seed S] [--vocab V]
        the decode mode's fill (the tool's splitmix64 ids at 0..D+7), then fresh ids, as one
        line: what a score run must be given to compare a decode-mode transcript.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import secrets
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evalbot.engine.contract.witness_spec import parse_witness  # noqa: E402
from evalbot.engine.measure import witness  # noqa: E402
from evalbot.engine.sandbox import proc  # noqa: E402

DEFAULT_FILL_SEED = 0x5EED5A4C1F11
FILL_ID_RANGE = 32000
WARM = 8
MASK = (1 << 64) - 1


def spec_for(mode: str, a: int, n: int) -> witness.WitnessSpec:
    prompt = a if mode == "prefill" else 1
    cell = f"m/prefill@{a}" if mode == "prefill" else f"m/decode@{a}"
    credit = a if mode == "prefill" else n
    return parse_witness({"name": f"{mode}-{a}", "argv": ["x"], "cells": {cell: credit},
                          "prompt_tokens": prompt, "steps": n, "output": {"kind": "step_lines"},
                          "output_tokens": n + 1, "clock": "handoff", "timeout_s": 600},
                         "smoke", {cell})


def run_once(tool: str, model: str, mode: str, a: int, n: int, ids: list[int], log: Path,
             ctxs: str, env: list[str] | None = None) -> dict[str, object]:
    """One witness process in the profile's environment (plus `env`: NAME=VALUE items)."""
    spec = spec_for(mode, a, n)
    argv = [tool, mode, model, str(a), str(n)] + ([f"--ctxs={ctxs}"] if ctxs else [])
    extra = dict(item.split("=", 1) for item in env or [])
    done = proc.run(argv, cwd=log.parent, timeout_s=spec.timeout_s, log=log, trusted=True,
                    env={"SPARKINFER_KV_INT8": "1", "CUDA_VISIBLE_DEVICES": "0", **extra},
                    handoff=witness.handoff_of(spec, ids))
    steps = witness.read_output_ids(done.output, spec.output) if done.ok else []
    timing = next((ln for ln in done.output.splitlines() if ln.startswith("witness-timing:")), "")
    return {"mode": mode, "a": a, "n": n, "rc": done.returncode, "handoff_s": done.handoff_s,
            "wall_s": round(done.wall_s, 4), "steps": len(steps),
            "digest": hashlib.sha256(" ".join(map(str, steps)).encode()).hexdigest()[:12],
            "timing": timing, "step_ids": steps if len(steps) <= 64 else steps[:64]}


def reps(args: argparse.Namespace) -> None:
    spec = spec_for(args.mode, args.a, args.n)
    out = Path(args.out)
    rows = []
    for k in range(args.reps):
        ids = [secrets.randbelow(spec.id_range) for _ in range(spec.prompt_tokens + spec.steps)]
        row = run_once(args.tool, args.model, args.mode, args.a, args.n, ids,
                       out.with_name(f"{out.stem}-{k}.log"), args.ctxs, args.env)
        rows.append(row)
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps({k: v for k, v in row.items() if k != "step_ids"}), flush=True)
    secs = [float(str(r["handoff_s"])) for r in rows if r["handoff_s"] is not None]
    if len(secs) >= 2:
        diffs = [b - c for b, c in zip(secs[::2], secs[1::2], strict=False)]
        summary = {"summary": f"{args.mode}-{args.a}-{args.n}", "n": len(secs),
                   "mean_s": statistics.mean(secs), "sd_s": statistics.stdev(secs),
                   "min_s": min(secs), "max_s": max(secs),
                   "pair_diff_sd_s": statistics.stdev(diffs) if len(diffs) >= 2 else None}
        with out.open("a") as f:
            f.write(json.dumps(summary) + "\n")
        print(json.dumps(summary), flush=True)


def fixed(args: argparse.Namespace) -> None:
    lines = Path(args.ids).read_text().splitlines()
    ids = [int(t) for t in lines[0].split()] + [int(t) for t in lines[1:] if t.strip()]
    out = Path(args.out)
    row = run_once(args.tool, args.model, args.mode, args.a, args.n, ids,
                   out.with_suffix(".log"), args.ctxs, args.env)
    spec = spec_for(args.mode, args.a, args.n)
    log = out.with_suffix(".log")
    done_ids = witness.read_output_ids(log.read_text(), spec.output) if log.is_file() else []
    out.write_text(" ".join(map(str, done_ids)) + "\n")
    print(json.dumps({k: v for k, v in row.items() if k != "step_ids"}), flush=True)
    print("STEP_IDS", " ".join(map(str, done_ids)), flush=True)


def compare(args: argparse.Namespace) -> None:
    steps = [int(t) for t in Path(args.steps).read_text().split()]
    am: dict[int, int] = {}
    for ln in Path(args.score_log).read_text().splitlines():
        if ln.startswith("S i="):
            am[int(ln.split()[1][2:])] = int(ln.split(" am=")[1].split()[0])
    pairs = [(s, am.get(args.first_pos + k)) for k, s in enumerate(steps)]
    agree = sum(1 for s, m in pairs if s == m)
    print(json.dumps({"compared": len(pairs), "agree": agree,
                      "first": {"tool": pairs[0][0], "score": pairs[0][1]} if pairs else None,
                      "disagree_at": [k for k, (s, m) in enumerate(pairs) if s != m][:20]}))


def same(args: argparse.Namespace) -> None:
    a, b = ([int(t) for t in Path(p).read_text().split()] for p in (args.a, args.b))
    pairs = list(zip(a, b, strict=False))
    print(json.dumps({"compared": max(len(a), len(b)), "agree": sum(x == y for x, y in pairs),
                      "disagree_at": [k for k, (x, y) in enumerate(pairs) if x != y][:40]}))


def fill_ids(args: argparse.Namespace) -> None:
    state = (args.seed ^ args.depth) & MASK
    rng = min(args.vocab, FILL_ID_RANGE)
    out = []
    for _ in range(args.depth + WARM):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        out.append((z ^ (z >> 31)) % rng)
    fresh = [secrets.randbelow(1000) for _ in range(args.more)]
    print(" ".join(map(str, out + fresh)))


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("reps", "fixed"):
        p = sub.add_parser(name)
        for arg in ("tool", "model", "mode"):
            p.add_argument(arg)
        p.add_argument("a", type=int)
        p.add_argument("n", type=int)
        p.add_argument("--out", required=True)
        p.add_argument("--ctxs", default="")
        p.add_argument("--env", action="append", default=[], help="NAME=VALUE for the process")
        if name == "reps":
            p.add_argument("--reps", type=int, default=5)
        else:
            p.add_argument("--ids", required=True)
    p = sub.add_parser("compare")
    p.add_argument("steps")
    p.add_argument("score_log")
    p.add_argument("first_pos", type=int)
    p = sub.add_parser("same")
    p.add_argument("a")
    p.add_argument("b")
    p = sub.add_parser("fill-ids")
    p.add_argument("depth", type=int)
    p.add_argument("more", type=int)
    p.add_argument("--seed", type=int, default=DEFAULT_FILL_SEED)
    p.add_argument("--vocab", type=int, default=248320)
    args = ap.parse_args()
    {"reps": reps, "fixed": fixed, "compare": compare, "same": same, "fill-ids": fill_ids}[args.cmd](args)


if __name__ == "__main__":
    main()
