"""Score base and head against the reference on seeded held-out windows, in growing rounds.

The seed orders a fixed grid of corpus windows; look j scores the first looks[j] chunks of that
order (long-context windows first, all in round one), so the reference cache never depends on the
seed. After each round the harness applies the look of engine/scoring/correctness_stats.py with the
bot's critical value and stops once decided (or bit-identical); the bot replays every look.
Round one also scores the prefixes of the speed-tokens stream that the timed decodes ran, so the
greedy tokens of each decode can be checked against what the score run predicts.

Windows and speed tokens are slices of one id stream: the corpus as the scored model's own
tokenizer reads it (the profile's `tokenize_argv`, run once per model, recipe and corpus, with the
reference's trust) or, without a tokenizer, the corpus bytes (a byte vocabulary, the demo's), made
by engine.scoring.tokens.
"""

from __future__ import annotations

import hashlib
import json
import random
import stat
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..contract.job import Correctness, Job
from ..contract.score_dump import DumpError, check_rows, check_windows
from ..sandbox import proc, safe_io
from ..sandbox import session as sandbox
from ..sides.build import Built, verify
from .correctness_stats import TAIL, chunk, consistency_positions, look
from .failure import ScoreFailure
from .segments import chunk_looks, long_pieces, long_scored, scored_from
from .tokens import OUTPUT_CAP, Stream, scored_model, token_stream
from .vocab import out_of_vocabulary, vocab_size

DEFAULT_PATH = "the profile's score command on the built artifacts, same environment as speed"
# the harness's stopwatch: each side's score processes run in its stage `correctness_<side>`
Stage = Callable[[str], AbstractContextManager[object]]


def untimed(_: str) -> AbstractContextManager[object]:
    """No stopwatch: a stage that times nothing."""
    return nullcontext()


@dataclass(frozen=True)
class Window:
    index: int  # position in the grid of windows of this kind
    kind: str  # short | long
    tokens: list[int]


def grid(n_tokens: int, window: int) -> int:
    return n_tokens // window


def window_order(n_available: int, seed: int, kind: str = "short") -> list[int]:
    """The seed orders a fixed grid; growing rounds take the next windows of that order."""
    return random.Random(f"{seed}:{kind}").sample(range(n_available), n_available)


def pick_windows(n_available: int, count: int, seed: int, kind: str = "short") -> list[int]:
    if count > n_available:
        raise ValueError(f"asked for {count} {kind} windows, the corpus has {n_available}")
    return window_order(n_available, seed, kind)[:count]


def window_tokens(text: Sequence[int], index: int, size: int) -> list[int]:
    return list(text[index * size : (index + 1) * size])


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
    """The chunks of a window (engine/scoring/segments.py): a short window is one; a long one
    is cut into shallow and deep pieces (deep pieces only with `long_scored: deep`)."""
    if window.kind != "long":
        return [("short", 0, len(window.tokens) - 1)]
    return long_pieces(spec, len(window.tokens))


def score(job: Job, built: dict[str, Built], jobdir: Path, harness: Path,
          cells: list[dict[str, Any]] | None = None,
          stage: Stage = untimed) -> dict[str, Any]:
    """Score in rounds until the look decides; `cells` are the speed records (greedy tokens)."""
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
    # box seconds per side, every round (the reference's 0 when its windows were cached)
    seconds = {"reference": 0.0, "base": 0.0, "head": 0.0}
    counts, used = chunk_looks(spec, spec.looks), 0
    vocab = vocab_size(model.path)
    for j, count in enumerate(spec.looks):
        batch, used = windows[used:count], count
        extra = [c["tokens"] for c in checks if c["tokens"]] if j == 0 else []
        asked = [w.tokens for w in batch] + extra
        froms = [scored_from(spec, w.kind, len(w.tokens)) for w in batch] + [0] * len(extra)
        with _timed(seconds, "reference", stage):
            refs = _references(job, spec, model.path, model.sha256, stream, jobdir, harness, batch)
        outs = {}
        for side in ("base", "head"):
            with _timed(seconds, side, stage):
                outs[side] = _score_side(spec, side, j, asked, froms, model.path, jobdir,
                                         harness, built[side], job.env, vocab)
        identical = identical and outs["base"][: len(batch)] == outs["head"][: len(batch)]
        chunks += [row for k, w in enumerate(batch)
                   for row in _chunks(spec, w, refs[w.kind, w.index], outs["base"][k],
                                      outs["head"][k])]
        if j == 0:
            consistency = _consistency(spec, checks, outs, len(batch), cells)
        assert len(chunks) == counts[j], (len(chunks), counts[j])  # the bot's plan, cut alike
        looks.append(look(chunks, spec.critical[j], spec.margin, spec.kl_margin, spec.alpha,
                          spec.deep_critical))
        if identical or looks[-1]["decision"] != "undecided":
            stopped = "identical" if identical else "decided"
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
        "stopped": stopped,
        "rule": {"looks": spec.looks, "chunk_looks": counts, "critical": spec.critical,
                 "deep_critical": spec.deep_critical, "alpha": spec.alpha,
                 "margin": spec.margin, "kl_margin": spec.kl_margin},
        "floors": spec.floors,
        "consistency": consistency,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
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
    """The window's chunks, one per piece. The reference holds every position of the window,
    the sides' dumps every position from the first scored one (scored_from) on."""
    rows = []
    off = scored_from(spec, window.kind, len(window.tokens))
    for kind, a, b in pieces(spec, window):
        row = chunk(window.index, kind, ref[a:b], base[a - off:b - off], head[a - off:b - off])
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


def _score_side(spec: Correctness, side: str, round_: int, windows: list[list[int]],
                froms: list[int], model: str, jobdir: Path, harness: Path, built: Built,
                env: dict[str, str], vocab: int | None) -> list[Any]:
    verify(built)
    # a plain list of windows, or with the first scored position of each when one is not 0
    # (engine/llamacpp/score.py read_tokens: {"windows", "score_from"})
    doc: Any = {"windows": windows, "score_from": froms} if any(froms) else windows
    tokens_file = safe_io.input_file(jobdir, f"tokens-{round_}.json", json.dumps(doc).encode())
    # position i predicts token i + 1: a window of n ids scored from f gives positions f..n-2
    return _run_score(spec.score_argv, side, f"{side}-{round_}", spec, tokens_file, model,
                      jobdir, harness, built.artifact_dir, env,
                      [len(w) - 1 - f for w, f in zip(windows, froms, strict=True)], vocab)


def _references(job: Job, spec: Correctness, model_path: str, model_sha: str, stream: Stream,
                jobdir: Path, harness: Path, batch: list[Window]) -> dict[tuple[str, int], Any]:
    """Reference top-k for the windows of this round, each cached on the box per (model,
    reference recipe, corpus version with its tokenizer, window size): a window's reference
    depends only on its own tokens, so the cache fills as seeds pick windows and is reused by
    every later evaluation; no round waits for windows it does not score."""
    out: dict[tuple[str, int], Any] = {}
    cache_root = Path(job.cache_dir) if job.cache_dir else jobdir
    for kind, size in (("short", spec.window_tokens), ("long", spec.long_window_tokens)):
        wanted = [w for w in batch if w.kind == kind]
        if not wanted:
            continue
        version = stream.long_version if kind == "long" and stream.long_ids else stream.version
        # every position of a window (entries of older versions that kept only the deep
        # positions had that position in their key: they are never read as whole windows)
        recipe = hashlib.sha256(json.dumps([model_sha, spec.reference_argv, version, size,
                                            spec.topk]).encode()).hexdigest()[:24]
        folder = cache_root / "reference" / recipe
        for w in wanted:  # each entry checked against the folder's sha256 manifest
            hit = safe_io.cache_get(folder / f"{w.index}.json", OUTPUT_CAP)
            if hit is not None:
                out[kind, w.index] = hit
        missing = [w for w in wanted if (kind, w.index) not in out]
        if missing:
            tokens_file = safe_io.input_file(
                jobdir, f"reference-tokens-{size}.json",
                json.dumps([w.tokens for w in missing]).encode())
            got = _run_score(spec.reference_argv, "reference", f"reference-{size}", spec,
                             tokens_file, model_path, jobdir, harness, harness, job.env,
                             [len(w.tokens) - 1 for w in missing], vocab_size(model_path))
            for w, ref in zip(missing, got, strict=True):
                safe_io.cache_put(folder / f"{w.index}.json", ref)
        for w in wanted:  # checked again: a cache entry is not proof of anything
            row = out.get((kind, w.index))
            if row is None:
                row = safe_io.cache_get(folder / f"{w.index}.json", OUTPUT_CAP)
            out[kind, w.index] = _cached_reference(row, spec, w)
    return out


def _cached_reference(row: Any, spec: Correctness, window: Window) -> Any:
    """A cached reference window, checked again: a cache file is not proof of anything."""
    try:
        return check_rows(row, spec.topk, len(window.tokens) - 1)
    except DumpError as exc:
        raise ScoreFailure("reference", "unparsable", f"the cached reference of {window.kind} "
                           f"window {window.index} is unusable: {exc}") from exc


def _run_score(argv: list[str], side: str, tag: str, spec: Correctness, tokens_file: Path,
               model: str, jobdir: Path, harness: Path, build: Path,
               env: dict[str, str], lengths: list[int], vocab: int | None) -> list[Any]:
    outdir = sandbox.output_dir(jobdir, trusted=side == "reference")
    out = outdir / f"{tag}.json"
    log = jobdir / "logs" / f"score-{tag}.log"
    filled = [a.format(python=sys.executable, harness=str(harness), build=str(build),
                       model=model, tokens=str(tokens_file), out=str(out), topk=str(spec.topk))
              for a in argv]
    cwd = harness if side == "reference" else build
    try:  # the run's output directory, made for it alone, goes: nothing stays to be found
        done = proc.run(filled, cwd=cwd, timeout_s=spec.timeout_s, log=log, env=env,
                        trusted=side == "reference")
        if not done.ok:
            kind = "timeout" if done.timed_out else "crashed"
            raise ScoreFailure(side, kind, f"score run {kind} (exit {done.returncode})", log)
        return _read_score(out, side, log, spec.topk, lengths, vocab)
    finally:
        safe_io.remove_tree(outdir)


def _read_score(out: Path, side: str, log: Path, topk: int, lengths: list[int],
                vocab: int | None) -> list[Any]:
    who = {"head": "the PR's", "base": "main's"}.get(side, "the reference's")
    odd = _not_a_file(out)
    if odd:  # named before opening: a FIFO or a device is never read from
        raise ScoreFailure(side, "unparsable", f"score output unreadable: {who} score dump "
                           f"{out.name} is {odd}, not a regular file", log)
    try:
        doc = safe_io.read_json(out, OUTPUT_CAP)
        windows = check_windows(doc["windows"], topk, lengths)
        if vocab is not None:
            bad = out_of_vocabulary(windows, vocab)
            if bad:
                raise DumpError(bad)
        return [[{"top": top, "argmax": am} for top, am in zip(w["top"], w["argmax"], strict=True)]
                for w in windows]
    except DumpError as exc:  # NaN, a repeated id, an argmax that is not the top, a short row
        raise ScoreFailure(side, "unparsable", f"{who} score dump is refused ({out.name}): {exc}",
                           log) from exc
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ScoreFailure(side, "unparsable", f"score output unreadable: {who} {out.name}: "
                           f"{exc}", log) from exc


def _not_a_file(path: Path) -> str:
    """What stands at a dump path when it is not a plain file ("" when it is, or is absent)."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return ""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a link")):
        if test(mode):
            return name
    return ""
