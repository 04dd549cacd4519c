"""How a scored window is cut into chunks (pure): the unit of the guard's statistics.

A short window is one chunk. A long window is scored at every position (its shallow part is
129 short windows' worth of the same corpus text, so bit-identity and damage that fires on some
inputs are seen there at no extra process), and cut into chunks: the shallow part in pieces of
`window_tokens` positions (kind "long"), and its deepest `long_score_tokens` positions (kind
"deep", context >= long_window_tokens - long_score_tokens) in DEEP_PIECES pieces. The deep
chunks are judged on their own as well (correctness_stats.look), so a loss confined to depth is
never diluted by the shallow positions around it; several pieces per window give that test
degrees of freedom (2 windows would give it one). With `long_scored: deep` only the deep pieces
are scored: the score command fills the positions before them without logits (sparkinfer's
batched prefill, the path its prefill cells time), so a long window costs its fill and
long_score_tokens steps instead of a step per position.

The bot computes the critical values from these counts before the job (chunk_looks), and the
harness cuts the chunks with the same functions, so the replay compares like with like.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

DEEP_PIECES = 8  # deep chunks per long window


def long_pieces(spec: Any, n_tokens: int | None = None) -> list[tuple[str, int, int]]:
    """(kind, first position, end position) of each chunk of one long window of n_tokens ids
    (positions 0 .. n_tokens - 2 are scored; position p has seen p + 1 tokens)."""
    n = (n_tokens if n_tokens is not None else spec.long_window_tokens) - 1
    deep = min(spec.long_score_tokens or 0, n)
    start = n - deep
    out: list[tuple[str, int, int]] = []
    shallow = start if long_scored(spec) == "all" else 0
    for a in range(0, shallow, spec.window_tokens):
        b = min(a + spec.window_tokens, start)
        if out and b - a < spec.window_tokens // 2:  # a short tail joins the piece before it
            out[-1] = (out[-1][0], out[-1][1], b)
        else:
            out.append(("long", a, b))
    if deep:
        pieces = min(DEEP_PIECES, deep // 2) if deep >= 4 else 1
        edges = [start + round(i * deep / pieces) for i in range(pieces + 1)]
        out += [("deep", a, b) for a, b in zip(edges, edges[1:], strict=False)]
    return out


def long_scored(spec: Any) -> str:
    """"all" (every position of a long window) or "deep" (its last long_score_tokens only)."""
    return str(getattr(spec, "long_scored", "all") or "all")


def scored_from(spec: Any, kind: str, n_tokens: int) -> int:
    """First position the score command scores in a window of n_tokens ids: 0, or for a long
    window scored deep only, the first deep position (the ids before it are its fill)."""
    if kind != "long" or long_scored(spec) != "deep":
        return 0
    return min(first for _, first, _ in long_pieces(spec, n_tokens))


def chunk_looks(spec: Any, looks: Sequence[int]) -> list[int]:
    """Chunks recorded by each look, from the looks' window counts (long windows all in the
    first look, as correctness.plan orders them)."""
    per_long = len(long_pieces(spec)) if spec.long_windows else 0
    extra = spec.long_windows * (per_long - 1)
    return [count + extra for count in looks]


def deep_chunks(spec: Any) -> int:
    """Deep chunks of an evaluation: the deep test's cluster count."""
    if not spec.long_windows:
        return 0
    return spec.long_windows * sum(1 for k, _, _ in long_pieces(spec) if k == "deep")


def window_key(chunk: dict[str, Any]) -> tuple[str, int]:
    """The scored window a chunk was cut from (deep and shallow pieces of one long window share
    it): the cluster for absolute levels, where a window's pieces are not independent."""
    kind = "long" if chunk.get("kind") in ("long", "deep") else str(chunk.get("kind", "short"))
    return kind, int(chunk.get("window", 0))
