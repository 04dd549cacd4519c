"""Read rates from an engine's output in the harness (the bot never parses engine output)."""

from __future__ import annotations

import json
import re
from typing import Any

from engine.job import Cell


class ParseError(ValueError):
    """The engine's output lacks a value: an error, never a zero."""


def read_rates(output: str, parse: dict[str, Any], cells: list[Cell]) -> dict[str, float]:
    """Map each cell key to the rate the engine printed for it."""
    kind = parse["kind"]
    if kind == "json_line":
        return _json_line(output, parse, cells)
    if kind == "regex":
        return _regex(output, parse, cells)
    if kind == "llama_bench":
        return _llama_bench(output, cells)
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


def _llama_bench(output: str, cells: list[Cell]) -> dict[str, float]:
    """llama-bench -o json: one entry per test; prefill is n_prompt>0, decode n_gen>0."""
    try:
        start = output.index("[")
        entries = json.loads(output[start : output.rindex("]") + 1])
    except ValueError as exc:
        raise ParseError(f"no llama-bench JSON array in the output: {exc}") from exc
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
        out[cell.key] = _positive(wanted[0].get("avg_ts"), cell)
    return out


def _positive(value: Any, cell: Cell) -> float:
    try:
        rate = float(value)
    except (TypeError, ValueError) as exc:
        raise ParseError(f"{cell.key}: {value!r} is not a number") from exc
    if not rate > 0 or rate != rate or rate == float("inf"):
        raise ParseError(f"{cell.key}: rate {rate} is not a positive finite number")
    return rate
