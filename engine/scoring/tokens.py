"""The text the guard scores, as ids: the shipped corpus (and the long-context text) as the
scored model's tokenizer reads it, tokenized once and cached on the box; the bytes when the
profile has no tokenizer. The speed runs decode the same ids (`speed_tokens`). Here too the
scoring's one failure, `ScoreFailure`, which every step of it raises from this first one on.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..contract.job import Correctness, Job, Model
from ..sandbox import proc, safe_io
from ..sandbox import session as sandbox
from .long_corpus import long_text

CORPUS_DIR = Path(__file__).parent.parent / "corpus"
HARNESS = Path(__file__).resolve().parents[2]
MAX_ID = 2**31  # token ids are int32 in every tool the harness drives
OUTPUT_CAP = 256 << 20  # bytes of one score or tokenizer output file the harness will read


class ScoreFailure(Exception):
    """Which side failed (base, head or the reference), what kind of failure, and its log."""

    def __init__(self, side: str, kind: str, message: str, log: Path | None = None) -> None:
        super().__init__(message)
        self.side, self.kind, self.message, self.log = side, kind, message, log


def corpus_bytes() -> tuple[bytes, str]:
    """The shipped corpus and its version (a hash of its files, so a cache key follows edits)."""
    parts = [p.read_bytes() for p in sorted(CORPUS_DIR.glob("*.txt"))]
    text = b"\n".join(parts)
    return text, hashlib.sha256(text).hexdigest()[:16]


@dataclass(frozen=True)
class Stream:
    """The corpus as token ids, and its version: the corpus hash, plus `/<tokenizer>` when a
    tokenizer cut it (so no cache or result of bytes is ever mixed with one of ids)."""

    ids: list[int]
    version: str
    # The long-context text (engine/scoring/long_corpus.py) as ids, for long windows; empty when the
    # profile scores none.
    long_ids: list[int] = field(default_factory=list)
    long_version: str = ""


def speed_tokens(jobdir: Path, job: Job | None = None, harness: Path = HARNESS) -> Path:
    """The id stream the scored model reads, for timed decodes that must run real text; the
    speed/score consistency check then compares like with like."""
    ids = token_stream(job, jobdir, harness).ids
    path = jobdir / "speed-tokens.json"
    path.write_text(json.dumps(ids))
    return path


def token_stream(job: Job | None, jobdir: Path, harness: Path = HARNESS) -> Stream:
    """The corpus as the scored model's ids, tokenized once per (model sha256, tokenize
    recipe, corpus version) and cached; the corpus bytes when the profile has no tokenizer."""
    text, corpus = corpus_bytes()
    spec = job.correctness if job is not None else None
    long, long_version = long_text(text) if spec is not None and spec.long_windows else (b"", "")
    if job is None or spec is None or not spec.tokenize_argv:
        return Stream(list(text), corpus, list(long), long_version)
    model = scored_model(job, spec)
    tokenizer = hashlib.sha256(json.dumps([spec.tokenize_argv, model.sha256]).encode()
                               ).hexdigest()[:16]
    ids = _cached_ids(job, spec, model.path, text, corpus, tokenizer, jobdir, harness)
    long_ids = _cached_ids(job, spec, model.path, long, long_version, tokenizer, jobdir,
                           harness) if long else []
    return Stream(ids, f"{corpus}/{tokenizer}", long_ids,
                  f"{long_version}/{tokenizer}" if long else "")


def _cached_ids(job: Job, spec: Correctness, model: str, text: bytes, version: str,
                tokenizer: str, jobdir: Path, harness: Path) -> list[int]:
    """One text's ids, tokenized once per (text version, tokenizer) and cached on the box."""
    cache_root = Path(job.cache_dir) if job.cache_dir else jobdir
    cached = cache_root / "tokens" / f"{version}-{tokenizer}.json"
    hit = safe_io.cache_get(cached, OUTPUT_CAP)
    if hit is not None:
        return list(hit)
    ids = _tokenize(job, spec, model, text, version, jobdir, harness)
    safe_io.cache_put(cached, ids)
    return ids


def scored_model(job: Job, spec: Correctness) -> Model:
    return next(m for m in job.models if not spec.model or m.name == spec.model)


def _tokenize(job: Job, spec: Correctness, model: str, text: bytes, corpus: str, jobdir: Path,
              harness: Path) -> list[int]:
    """Run the profile's tokenizer the way the reference runs: from the harness copy, never
    from a built side. Its failure is the reference's, so infrastructure's, never the PR's."""
    text_file = safe_io.input_file(jobdir, f"corpus-{corpus}.txt", text)
    outdir = sandbox.output_dir(jobdir, trusted=True)
    out = outdir / "tokenize.json"
    log = jobdir / "logs" / "tokenize.log"
    filled = [a.format(python=sys.executable, harness=str(harness), model=model,
                       text=str(text_file), out=str(out)) for a in spec.tokenize_argv]
    try:
        done = proc.run(filled, cwd=harness, timeout_s=spec.timeout_s, log=log, env=job.env,
                        trusted=True)
        if not done.ok:
            kind = "timeout" if done.timed_out else "crashed"
            raise ScoreFailure("reference", kind, f"tokenizer (correctness.tokenize_argv) {kind} "
                               f"(exit {done.returncode})", log)
        return _read_ids(out, log)
    finally:
        safe_io.remove_tree(outdir)


def _read_ids(out: Path, log: Path) -> list[int]:
    """The tokenizer's output: a non-empty JSON list of int token ids in [0, 2^31)."""
    try:
        ids = safe_io.read_json(out, OUTPUT_CAP)
    except (OSError, ValueError) as exc:
        raise ScoreFailure("reference", "unparsable",
                           f"tokenizer output unreadable: {exc}", log) from exc
    if not isinstance(ids, list) or not ids:
        raise ScoreFailure("reference", "unparsable", "tokenizer output is not a non-empty JSON "
                           f"list of token ids (got {type(ids).__name__})", log)
    bad = next((k for k, x in enumerate(ids) if type(x) is not int or not 0 <= x < MAX_ID), None)
    if bad is not None:
        raise ScoreFailure("reference", "unparsable", f"tokenizer output item {bad} is "
                           f"{ids[bad]!r}, not a token id (an int in [0, 2^31))", log)
    return ids
