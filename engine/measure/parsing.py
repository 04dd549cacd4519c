"""Read rates from an engine's output in the harness (the bot never parses engine output)."""

from __future__ import annotations

import json
import re
from typing import Any

from ..contract.job import Cell
from ..contract.score_dump import DumpError, check_position


class ParseError(ValueError):
    """The engine's output lacks a value: an error, never a zero."""


def read_rates(output: str, parse: dict[str, Any], cells: list[Cell]) -> dict[str, float]:
    """Map each cell key to the rate the engine printed for it."""
    _refuse_failures(output, parse)
    kind = parse["kind"]
    if kind == "json_line":
        return _json_line(output, parse, cells)
    if kind == "regex":
        return _regex(output, parse, cells)
    if kind == "llama_bench":
        return _llama_bench(output, cells, parse.get("reduce", "mean"),
                            parse.get("discard_first", 0))
    raise ParseError(f"unknown parse kind {kind!r}")


def read_argmax(output: str, parse: dict[str, Any], cells: list[Cell]) -> dict[str, list[int]]:
    """The greedy tokens a decode sample produced, for the speed/score consistency check."""
    template = parse.get("argmax")
    if parse["kind"] != "json_line" or not template:
        return {}
    doc = _json_doc(output, parse["prefix"])
    return {c.key: [int(t) for t in _dig(doc, template.format(ctx=c.ctx))]
            for c in cells if c.metric == "decode"}


def _json_doc(output: str, prefix: str) -> Any:
    lines = [ln for ln in output.splitlines() if ln.startswith(prefix)]
    if len(lines) != 1:
        raise ParseError(f"expected one line starting {prefix.strip()!r}, found {len(lines)}")
    try:
        return json.loads(lines[0][len(prefix) :])
    except json.JSONDecodeError as exc:
        raise ParseError(f"{prefix.strip()} line is not JSON: {exc}") from exc


def _json_line(output: str, parse: dict[str, Any], cells: list[Cell]) -> dict[str, float]:
    doc = _json_doc(output, parse["prefix"])
    out = {}
    for cell in cells:
        path = parse["fields"][cell.metric].format(ctx=cell.ctx)
        out[cell.key] = _positive(_dig(doc, path), cell)
    return out


def _dig(doc: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(doc, dict) or part not in doc:
            raise ParseError(f"field {path!r} missing from the engine's JSON")
        doc = doc[part]
    return doc


def _regex(output: str, parse: dict[str, Any], cells: list[Cell]) -> dict[str, float]:
    out = {}
    for cell in cells:
        pattern = parse["patterns"][cell.metric]
        found = re.findall(pattern, output, flags=re.MULTILINE)
        if len(found) != 1:
            raise ParseError(f"{cell.key}: pattern {pattern!r} matched {len(found)} times")
        out[cell.key] = _positive(found[0], cell)
    return out


def _refuse_failures(output: str, parse: dict[str, Any]) -> None:
    """A line the engine marks as a failure (sparkinfer: `[FAIL] load`, `[SKIP] no GPU`)."""
    for prefix in parse.get("fail_prefixes", []):
        bad = [ln for ln in output.splitlines() if ln.startswith(prefix)]
        if bad:
            raise ParseError(f"the engine reported {bad[0].strip()[:200]!r}")


def _llama_bench(output: str, cells: list[Cell], reduce: str = "mean",
                 discard_first: int = 0) -> dict[str, float]:
    """llama-bench -o json: one entry per test; prefill is n_prompt>0, decode n_gen>0.

    One process runs -r repetitions per test; `reduce` is how they become this process's sample:
    `mean` (llama-bench's avg_ts) or `median` of its per-repetition `samples_ts`. The first
    `discard_first` tests of the process are not scored: on the H200 the first test after the
    model load ran ~10% slow in a third of the processes (docs/gpu-e2e.md), so the profile runs
    a throw-away copy of the first tests (a repeated depth) ahead of the scored ones.
    """
    entries = _bench_entries(output)
    if not isinstance(discard_first, int) or discard_first < 0:
        raise ParseError(f"llama_bench discard_first must be a count >= 0, not {discard_first!r}")
    if len(entries) <= discard_first:
        raise ParseError(f"llama-bench printed {len(entries)} tests; the first {discard_first} "
                         "are throw-away and none is left to score")
    entries = entries[discard_first:]
    out = {}
    for cell in cells:
        wanted = [
            e
            for e in entries
            if int(e.get("n_depth", 0)) == cell.ctx
            and (int(e.get("n_gen", 0)) > 0) == (cell.metric == "decode")
        ]
        if len(wanted) != 1:
            raise ParseError(f"{cell.key}: {len(wanted)} llama-bench entries match")
        out[cell.key] = _positive(_bench_value(wanted[0], reduce, cell), cell)
    return out


def _bench_entries(output: str) -> list[dict[str, Any]]:
    """The JSON array llama-bench prints from a line `[` to a line `]`; the harness merges
    stderr into the same stream, so log lines (which start with a letter) are dropped from it."""
    lines = output.splitlines()
    try:
        start = lines.index("[")
        end = len(lines) - 1 - lines[::-1].index("]")
    except ValueError:
        start = end = -1
    if start < 0 or end <= start:
        raise ParseError("no llama-bench JSON array (a line '[' ... a line ']') in the output")
    body = [ln for ln in lines[start : end + 1] if not ln[:1].isalpha()]
    try:
        entries = json.loads("\n".join(body))
    except ValueError as exc:
        raise ParseError(f"llama-bench JSON array unreadable: {exc}") from exc
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ParseError("llama-bench JSON is not a list of test entries")
    return entries


def _bench_value(entry: dict[str, Any], reduce: str, cell: Cell) -> Any:
    if reduce == "mean":
        return entry.get("avg_ts")
    if reduce != "median":
        raise ParseError(f"llama_bench reduce must be mean or median, not {reduce!r}")
    samples = entry.get("samples_ts")
    if not isinstance(samples, list) or not samples:
        raise ParseError(f"{cell.key}: llama-bench entry has no samples_ts")
    ordered = sorted(float(_positive(v, cell)) for v in samples)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


# One scored position, as sparkinfer's qwen3_gguf_score and engine/llamacpp/topk.cpp print it.
_SCORE = re.compile(r"^S i=(\d+) tgt=(-?\d+) am=(\d+) lp=(\S+) top=(\S+)$")


def read_score_lines(output: str, topk: int) -> list[dict[str, Any]]:
    """Windows of `S` lines: `W n` ... `END` blocks, or one bare block (sparkinfer's score tool).

    Returns per window {"top": [[[id, lp], ...] per position], "argmax": [...]}, the score
    contract of engine/scoring/correctness.py, each position checked by engine/contract/score_dump.py (sorted,
    cut to k; NaN, a repeated id or an argmax that is not the top refused). A window with a
    missing, repeated or short position is an error: a position is never filled in.
    """
    lines = output.splitlines()
    if any(ln.startswith("W ") for ln in lines):
        return [_score_window(block, topk, expect, first)
                for expect, first, block in _blocks(lines)]
    return [_score_window([ln for ln in lines if ln.startswith("S ")], topk, None)]


def _blocks(lines: list[str]) -> list[tuple[int, int, list[str]]]:
    """`W <n tokens> [<first scored position>]` ... `END` blocks: (positions, first, lines)."""
    out: list[tuple[int, int, list[str]]] = []
    current: list[str] | None = None
    for ln in lines:
        if ln.startswith("W "):
            if current is not None:
                raise ParseError("score output: window without END")
            head = ln.split()[1:]
            if not 1 <= len(head) <= 2 or not all(x.isdigit() for x in head):
                raise ParseError(f"score output: window header {ln[:60]!r}")
            current, size = [], int(head[0])
            first = int(head[1]) if len(head) == 2 else 0
        elif ln == "END":
            if current is None:
                raise ParseError("score output: END without W")
            out.append((size - 1 - first, first, current))
            current = None
        elif ln.startswith("S ") and current is not None:
            current.append(ln)
    if current is not None:
        raise ParseError("score output ends inside a window (no END): truncated")
    return out


def _score_window(lines: list[str], topk: int, expect: int | None,
                  first: int = 0) -> dict[str, Any]:
    if not lines:
        raise ParseError("score output has no S lines")
    top, argmax = [], []
    for k, ln in enumerate(lines):
        m = _SCORE.match(ln.strip())
        if not m:
            raise ParseError(f"score line not in the documented format: {ln[:120]!r}")
        if int(m.group(1)) != first + k:
            raise ParseError(f"score positions out of order: expected i={first + k}, "
                             f"got i={m.group(1)}")
        try:
            entries = [[int(i), float(lp)] for i, lp in (p.split(":") for p in m.group(5).split(","))]
            entry, am = check_position(entries, int(m.group(3)), topk, f"position {k}")
        except DumpError as exc:
            raise ParseError(str(exc)) from exc
        except ValueError as exc:
            raise ParseError(f"position {k}: top list is not id:logprob pairs: {exc}") from exc
        top.append(entry)
        argmax.append(am)
    if expect is not None and len(lines) != expect:
        raise ParseError(f"score window has {len(lines)} positions, expected {expect}")
    return {"top": top, "argmax": argmax}


def _positive(value: Any, cell: Cell) -> float:
    try:
        rate = float(value)
    except (TypeError, ValueError) as exc:
        raise ParseError(f"{cell.key}: {value!r} is not a number") from exc
    if not rate > 0 or rate != rate or rate == float("inf"):
        raise ParseError(f"{cell.key}: rate {rate} is not a positive finite number")
    return rate
