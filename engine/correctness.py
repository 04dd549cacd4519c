"""Score base and head against the reference on seeded held-out windows (numpy only).

Tail treatment (stated in every results file): a token outside one side's top-k gets the floor
log-probability -20 on that side; both distributions are then renormalised over the union of the
two top-k sets, and KL(reference || engine) is taken over that union.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

from engine import proc
from engine.build import Built, verify
from engine.job import Correctness, Job

CORPUS_DIR = Path(__file__).parent / "corpus"
FLOOR_LOGPROB = -20.0
TAIL = "missing top-k entries floored at -20, renormalised over the union of top-k sets"


class ScoreFailure(Exception):
    def __init__(self, side: str, kind: str, message: str, log: Path | None = None) -> None:
        super().__init__(message)
        self.side, self.kind, self.message, self.log = side, kind, message, log


def corpus_bytes() -> tuple[bytes, str]:
    """The shipped corpus and its version (a hash of its files, so a cache key follows edits)."""
    parts = [p.read_bytes() for p in sorted(CORPUS_DIR.glob("*.txt"))]
    text = b"\n".join(parts)
    return text, hashlib.sha256(text).hexdigest()[:16]


def speed_tokens(jobdir: Path) -> Path:
    """The corpus as tokens, for timed decodes that must run real text (not random bytes)."""
    text, _ = corpus_bytes()
    path = jobdir / "speed-tokens.json"
    path.write_text(json.dumps(list(text)))
    return path


def grid(n_bytes: int, window: int) -> int:
    return n_bytes // window


def pick_windows(n_windows_available: int, count: int, seed: int) -> list[int]:
    """The seed only picks windows from a fixed grid, so the reference cache stays valid."""
    if count > n_windows_available:
        raise ValueError(f"asked for {count} windows, the corpus has {n_windows_available}")
    return sorted(random.Random(seed).sample(range(n_windows_available), count))


def window_tokens(text: bytes, index: int, size: int) -> list[int]:
    return list(text[index * size : (index + 1) * size])


def score(job: Job, built: dict[str, Built], jobdir: Path, harness: Path) -> dict[str, Any]:
    spec = job.correctness
    assert spec is not None
    text, version = corpus_bytes()
    chosen = pick_windows(grid(len(text), spec.window_tokens), spec.windows, spec.seed)
    windows = [window_tokens(text, i, spec.window_tokens) for i in chosen]
    tokens_file = jobdir / "score" / "tokens.json"
    tokens_file.parent.mkdir(parents=True, exist_ok=True)
    tokens_file.write_text(json.dumps(windows))
    model = next(m for m in job.models if not spec.model or m.name == spec.model)
    ref = _reference(job, spec, model.path, model.sha256, text, version, jobdir, harness)
    sides = {}
    for side in ("base", "head"):
        verify(built[side])
        sides[side] = _run_score(spec.score_argv, side, spec, tokens_file, model.path, jobdir,
                                 harness, built[side].artifact_dir, job.env)
    reference = [ref[i] for i in chosen]
    chunks = [_chunk(i, r, sides["base"][k], sides["head"][k])
              for k, (i, r) in enumerate(zip(chosen, reference, strict=True))]
    return {
        "seed": spec.seed,
        "corpus_version": version,
        "model": model.name,
        "window_tokens": spec.window_tokens,
        "windows": chosen,
        "tokens": sum(c["positions"] for c in chunks),
        "topk": spec.topk,
        "tail": TAIL,
        "path": "engine score command on the built artifacts, same environment as speed",
        "identical": sides["base"] == sides["head"],
        "chunks": chunks,
    }


def _reference(job: Job, spec: Correctness, model_path: str, model_sha: str, text: bytes,
               version: str, jobdir: Path, harness: Path) -> list[list[dict[str, Any]]]:
    """Reference top-k for every grid window, cached per (model, reference recipe, corpus)."""
    recipe = hashlib.sha256(json.dumps([model_sha, spec.reference_argv, version,
                                        spec.window_tokens, spec.topk]).encode()).hexdigest()[:24]
    cache_root = Path(job.cache_dir) if job.cache_dir else jobdir
    cached = cache_root / "reference" / f"{recipe}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    every = [window_tokens(text, i, spec.window_tokens) for i in range(grid(len(text), spec.window_tokens))]
    tokens_file = jobdir / "score" / "reference-tokens.json"
    tokens_file.parent.mkdir(parents=True, exist_ok=True)
    tokens_file.write_text(json.dumps(every))
    out = _run_score(spec.reference_argv, "reference", spec, tokens_file, model_path, jobdir,
                     harness, harness, job.env)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(".tmp")
    tmp.write_text(json.dumps(out))
    tmp.rename(cached)
    return out


def _run_score(argv: list[str], side: str, spec: Correctness, tokens_file: Path, model: str,
               jobdir: Path, harness: Path, build: Path, env: dict[str, str]) -> list[Any]:
    out = jobdir / "score" / f"{side}.json"
    log = jobdir / "logs" / f"score-{side}.log"
    filled = [a.format(python=sys.executable, harness=str(harness), build=str(build),
                       model=model, tokens=str(tokens_file), out=str(out), topk=str(spec.topk))
              for a in argv]
    cwd = harness if side == "reference" else build
    env = {**env, "PYTHONPATH": str(harness)} if side == "reference" else env
    done = proc.run(filled, cwd=cwd, timeout_s=spec.timeout_s, log=log, env=env)
    if not done.ok:
        kind = "timeout" if done.timed_out else "crashed"
        raise ScoreFailure(side, kind, f"score run {kind} (exit {done.returncode})", log)
    try:
        doc = json.loads(out.read_text())
        return [[{"top": top, "argmax": am} for top, am in zip(w["top"], w["argmax"], strict=True)]
                for w in doc["windows"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ScoreFailure(side, "unparsable", f"score output unreadable: {exc}", log) from exc


def _kl(ref_top: list[list[float]], eng_top: list[list[float]]) -> float:
    ref = {int(t): float(lp) for t, lp in ref_top}
    eng = {int(t): float(lp) for t, lp in eng_top}
    union = sorted(ref.keys() | eng.keys())
    p = np.exp([ref.get(t, FLOOR_LOGPROB) for t in union])
    q = np.exp([eng.get(t, FLOOR_LOGPROB) for t in union])
    p, q = p / p.sum(), q / q.sum()
    return float(np.sum(p * (np.log(p) - np.log(q))))


def _chunk(index: int, ref: list[dict[str, Any]], base: list[dict[str, Any]],
           head: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-window sums, so the grader can form chunk-level (cluster) statistics."""
    n = min(len(ref), len(base), len(head))
    ref_am = [int(ref[i]["top"][0][0]) for i in range(n)]
    base_ok = [int(base[i]["argmax"]) == ref_am[i] for i in range(n)]
    head_ok = [int(head[i]["argmax"]) == ref_am[i] for i in range(n)]
    base_kl = [_kl(ref[i]["top"], base[i]["top"]) for i in range(n)]
    head_kl = [_kl(ref[i]["top"], head[i]["top"]) for i in range(n)]
    return {
        "window": index,
        "positions": n,
        "base_top1": sum(base_ok),
        "head_top1": sum(head_ok),
        "base_kl_sum": float(sum(base_kl)),
        "head_kl_sum": float(sum(head_kl)),
        "head_only_right": sum(h and not b for h, b in zip(head_ok, base_ok, strict=True)),
        "base_only_right": sum(b and not h for h, b in zip(head_ok, base_ok, strict=True)),
        "kl_diff_sum": float(sum(head_kl) - sum(base_kl)),
    }
