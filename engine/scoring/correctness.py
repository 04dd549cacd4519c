"""Score base and head against the reference on seeded held-out windows, in growing rounds.

The seed orders a fixed grid of corpus windows; look j scores the first looks[j] chunks of that
order (long-context windows first, all in round one), so the reference cache never depends on the
seed. After each round the harness applies the look of engine/contract/shared/correctness_stats.py with the
bot's critical value until it decides (or the head is bit-identical), and main's drift test of
engine/contract/shared/drift.py until it tells; it stops when both have. The bot replays every look.
Round one also scores the prefixes of the speed-tokens stream that the timed decodes ran, so the
greedy tokens of each decode can be checked against what the score run predicts.

Windows and speed tokens are slices of one id stream: the corpus as the scored model's own
tokenizer reads it (the profile's `tokenize_argv`, run once per model, recipe and corpus, with the
reference's trust) or, without a tokenizer, the corpus bytes (a byte vocabulary, the demo's), made
by engine.scoring.tokens.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import Any

from ..contract.job import Correctness, Job
from ..contract.score_dump import tokens_doc
from ..contract.shared import drift
from ..contract.shared.correctness_stats import TAIL, chunk, consistency_positions, look
from ..contract.shared.segments import chunk_looks, long_pieces, long_scored, scored_from
from ..sandbox import safe_io
from ..sides.build import Built, verify
from .main_scores import MainScores
from .reference_cache import ReferenceCache
from .score_run import run_score
from .tokens import ScoreFailure, scored_model, token_stream
from .vocab import vocab_size
from .windows import Window, grid, window_tokens

DEFAULT_PATH = "the profile's score command on the built artifacts, same environment as speed"
# the harness's stopwatch: each side's score processes run in its stage `correctness_<side>`
Stage = Callable[[str], AbstractContextManager[object]]


def untimed(_: str) -> AbstractContextManager[object]:
    """No stopwatch: a stage that times nothing."""
    return nullcontext()


def window_order(n_available: int, seed: int, kind: str = "short") -> list[int]:
    """The seed orders a fixed grid; growing rounds take the next windows of that order."""
    return random.Random(f"{seed}:{kind}").sample(range(n_available), n_available)


def pick_windows(n_available: int, count: int, seed: int, kind: str = "short") -> list[int]:
    if count > n_available:
        raise ValueError(f"asked for {count} {kind} windows, the corpus has {n_available}")
    return window_order(n_available, seed, kind)[:count]


def plan(spec: Correctness, text: Sequence[int],
         long: Sequence[int] | None = None) -> list[Window]:
    """Every window the last look could need, in scoring order (long ones first); long windows
    come from `long` (the long-context text) when given."""
    short = spec.looks[-1] - spec.long_windows
    long = text if long is None or not long else long
    try:
        out = ([Window(i, "long", window_tokens(long, i, spec.long_window_tokens))
                for i in pick_windows(grid(len(long), spec.long_window_tokens),
                                      spec.long_windows, spec.seed, "long")]
               if spec.long_windows else [])
        out += [Window(i, "short", window_tokens(text, i, spec.window_tokens))
                for i in pick_windows(grid(len(text), spec.window_tokens), short, spec.seed)]
    except ValueError as exc:  # the profile asks for more text than the corpus has
        raise ScoreFailure("reference", "config", f"correctness plan: {exc} "
                           f"({len(text)} tokens of corpus, {len(long)} of long text)") from exc
    short_ones = [w for w in out if len(w.tokens) < 2]
    if short_ones:  # a window that predicts nothing would make an empty chunk
        raise ScoreFailure("reference", "config", f"correctness plan: {short_ones[0].kind} "
                           f"window {short_ones[0].index} has {len(short_ones[0].tokens)} tokens")
    return out


def pieces(spec: Correctness, window: Window) -> list[tuple[str, int, int]]:
    """The chunks of a window (engine/contract/shared/segments.py): a short window is one; a long one
    is cut into shallow and deep pieces (deep pieces only with `long_scored: deep`)."""
    if window.kind != "long":
        return [("short", 0, len(window.tokens) - 1)]
    return long_pieces(spec, len(window.tokens))


def score(job: Job, built: dict[str, Built], jobdir: Path, harness: Path,
          cells: list[dict[str, Any]] | None = None, *, device: str,
          stage: Stage = untimed) -> dict[str, Any]:
    """Score in rounds until the look decides; `cells` are the speed records (greedy tokens),
    `device` what the reference runs on (part of its cache key: engine/measure/gpu.py), `stage`
    the harness's stopwatch (engine/harness/stopwatch.py)."""
    spec = job.correctness
    assert spec is not None
    stream = token_stream(job, jobdir, harness)  # cached: the speed tokens tokenized it already
    text, version = stream.ids, stream.version
    model = scored_model(job, spec)
    windows = plan(spec, text, stream.long_ids)
    checks = _consistency_windows(cells or [], model.name, text)
    chunks: list[dict[str, Any]] = []
    looks: list[dict[str, Any]] = []
    identical, stopped, consistency = True, "cap", {}
    paired, main = "", "undecided"  # how the head's verdict ended ("identical", "decided")
    drift_looks: list[dict[str, Any]] = []  # main's drift test per look (engine/contract/shared/drift.py)
    cache = ReferenceCache(job, stream, device, jobdir, harness)
    obtained = {"cached": 0, "scored": 0}  # reference windows read from the cache, scored now
    vocab = vocab_size(model.path)
    mains = MainScores.on_box(job, built["base"], model, device, vocab)
    main_obtained = {"cached": 0, "scored": 0}  # main's windows, likewise
    # box seconds per side, every round (the reference's: only cache reads when its windows
    # were cached, by an earlier evaluation or `python -m engine warm-reference`)
    seconds = {"reference": 0.0, "base": 0.0, "head": 0.0}
    counts, used = chunk_looks(spec, spec.looks), 0
    for j, count in enumerate(spec.looks):
        batch, used = windows[used:count], count
        extra = [c["tokens"] for c in checks if c["tokens"]] if j == 0 else []
        asked = [w.tokens for w in batch] + extra
        froms = [scored_from(spec, w.kind, len(w.tokens)) for w in batch] + [0] * len(extra)
        with _timed(seconds, "reference", stage):
            refs, got = cache.references(batch)
        obtained = {k: obtained[k] + got[k] for k in obtained}
        outs: dict[str, list[Any]] = {}
        for side in ("base", "head"):
            # the windows of this round at the places given, scored now by the side's command
            run = partial(_score_side, spec, side, j, asked, froms, model.path, jobdir, harness,
                          built[side], job.env, vocab)
            with _timed(seconds, side, stage):
                if side == "base" and mains is not None:  # main's rows depend on no PR
                    outs[side], got = mains.scores(asked, froms, run)
                    main_obtained = {k: main_obtained[k] + got[k] for k in main_obtained}
                else:
                    outs[side] = run(list(range(len(asked))))
        identical = identical and outs["base"][: len(batch)] == outs["head"][: len(batch)]
        chunks += [row for k, w in enumerate(batch)
                   for row in _chunks(spec, w, refs[w.kind, w.index], outs["base"][k],
                                      outs["head"][k])]
        if j == 0:
            consistency = _consistency(spec, checks, outs, len(batch), cells)
        assert len(chunks) == counts[j], (len(chunks), counts[j])  # the bot's plan, cut alike
        if not paired:  # the head's verdict: its first decided look (or bit-identical)
            looks.append(look(chunks, spec.critical[j], spec.margin, spec.kl_margin,
                              spec.alpha, spec.deep_critical))
            if identical or looks[-1]["decision"] != "undecided":
                paired = "identical" if identical else "decided"
        if main == "undecided":  # main's drift, told at its first decided look
            main = drift.status(chunks, spec.drift, j) if spec.drift else "clear"
            if spec.drift:
                drift_looks.append({"chunks": len(chunks), "status": main})
        if paired and main != "undecided":  # main's drift undecided: its windows scored on
            stopped = paired
            break
    return {
        "seed": spec.seed,
        "corpus_version": version,
        "model": model.name,
        "window_tokens": spec.window_tokens,
        "long_window_tokens": spec.long_window_tokens,
        "long_score_tokens": spec.long_score_tokens,
        "long_scored": long_scored(spec),
        "long_corpus_version": stream.long_version,
        "depths": _depths(spec, _scored(windows, chunks)),
        "windows": [{"index": w.index, "kind": w.kind} for w in _scored(windows, chunks)],
        "tokens": sum(c["positions"] for c in chunks),
        "topk": spec.topk,
        "tail": TAIL,
        "path": spec.path or DEFAULT_PATH,
        "identical": identical,
        "chunks": chunks,
        "looks": looks,
        "drift_looks": drift_looks,
        "stopped": stopped,
        "rule": {"looks": spec.looks, "chunk_looks": counts, "critical": spec.critical,
                 "deep_critical": spec.deep_critical, "alpha": spec.alpha,
                 "margin": spec.margin, "kl_margin": spec.kl_margin,
                 **({"drift": spec.drift} if spec.drift else {})},
        "floors": spec.floors,
        "consistency": consistency,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "reference": {**obtained, "device": device},
        "main_scores": main_obtained,
    }


@contextmanager
def _timed(seconds: dict[str, float], side: str, stage: Stage) -> Iterator[None]:
    """The side's seconds in the section, and in the harness's stage of that side (a failing
    run's seconds too: the box spent them)."""
    t0 = time.monotonic()
    try:
        with stage(f"correctness_{side}"):
            yield
    finally:
        seconds[side] += time.monotonic() - t0


def _chunks(spec: Correctness, window: Window, ref: list[Any], base: list[Any],
            head: list[Any]) -> list[dict[str, Any]]:
    """The window's chunks, one per piece. The reference's rows and the sides' dumps alike
    hold every position from the first scored one (scored_from) on."""
    rows = []
    off = scored_from(spec, window.kind, len(window.tokens))
    for kind, a, b in pieces(spec, window):
        row = chunk(window.index, kind, ref[a - off:b - off], base[a - off:b - off],
                    head[a - off:b - off])
        row["first_position"] = a
        rows.append(row)
    return rows


def _scored(windows: list[Window], chunks: list[dict[str, Any]]) -> list[Window]:
    """The windows the recorded chunks come from (a long window gives several chunks)."""
    seen = {(("long" if c["kind"] == "deep" else c["kind"]), c["window"]) for c in chunks}
    return [w for w in windows if (w.kind, w.index) in seen]


def _depths(spec: Correctness, windows: list[Window]) -> dict[str, int] | None:
    """Context lengths (tokens seen) at the deep positions of long windows: least and most.
    Position p has seen p + 1 tokens."""
    deep = [(a, b) for w in windows if w.kind == "long"
            for kind, a, b in pieces(spec, w) if kind == "deep"]
    if not deep:
        return None
    return {"min": min(a for a, _ in deep) + 1, "max": max(b for _, b in deep)}


def _consistency_windows(cells: list[dict[str, Any]], model: str,
                         text: Sequence[int]) -> list[dict[str, Any]]:
    """One prefix of the speed-tokens stream per decode cell of the scored model with tokens."""
    out = []
    for cell in cells:
        greedy = cell.get("decode_argmax") or {}
        if cell["model"] != model or cell["metric"] != "decode" or not greedy:
            continue
        length = cell["ctx"] + max(len(v) for v in greedy.values())
        key = f"{cell['model']}/decode@{cell['ctx']}"
        if length > len(text):  # the decode ran past the stream: nothing to compare it with
            out.append({"key": key, "ctx": cell["ctx"], "greedy": {}, "tokens": [],
                        "unchecked": f"context {cell['ctx']} plus {length - cell['ctx']} "
                                     f"decoded tokens is beyond the {len(text)}-token stream"})
            continue
        out.append({"key": key, "ctx": cell["ctx"], "greedy": greedy,
                    "tokens": list(text[:length])})
    return out


def _consistency(spec: Correctness, checks: list[dict[str, Any]], outs: dict[str, list[Any]],
                 offset: int, cells: list[dict[str, Any]] | None) -> dict[str, Any]:
    scored = [c for c in checks if c["tokens"]]
    result: dict[str, Any] = {"tie_nats": spec.tie_nats, "max_mismatch": spec.max_mismatch,
                              "checked": bool(scored), "cells": [],
                              "unchecked": [{"key": c["key"], "reason": c["unchecked"]}
                                            for c in checks if not c["tokens"]]}
    if not scored:
        result["note"] = ("no decode cell of the scored model recorded greedy tokens"
                          if cells else "no speed cells to compare")
        if checks:
            result["note"] = "; ".join(f"{c['key']}: {c['unchecked']}" for c in checks)
    for k, check in enumerate(scored):
        for side in ("base", "head"):
            decode = [int(t) for t in check["greedy"].get(side, [])]
            gaps = consistency_positions(decode, outs[side][offset + k], check["ctx"])
            result["cells"].append({"key": check["key"], "ctx": check["ctx"], "side": side,
                                    "decode": decode[: len(gaps)], "gaps": gaps})
    return result


def _score_side(spec: Correctness, side: str, round_: int, asked: list[list[int]],
                asked_froms: list[int], model: str, jobdir: Path, harness: Path, built: Built,
                env: dict[str, str], vocab: int | None, which: list[int]) -> list[Any]:
    """The rows of the asked windows at the places `which`, in that order."""
    verify(built)
    windows, froms = [asked[i] for i in which], [asked_froms[i] for i in which]
    # a plain list of windows, or with the first scored position of each when one is not 0
    # (engine/llamacpp/score.py read_tokens: {"windows", "score_from"})
    doc = tokens_doc(windows, froms)
    tokens_file = safe_io.input_file(jobdir, f"tokens-{round_}.json", json.dumps(doc).encode())
    # position i predicts token i + 1: a window of n ids scored from f gives positions f..n-2
    return run_score(spec.score_argv, side, f"{side}-{round_}", spec, tokens_file, model,
                      jobdir, harness, built.artifact_dir, env,
                      [len(w) - 1 - f for w, f in zip(windows, froms, strict=True)], vocab)
