"""The fixed grids of corpus windows the guard scores (pure): a window is a slice of an id
stream, the `index`-th of its grid. The seed of an evaluation only orders a grid
(engine/scoring/correctness.py `plan`), so what a window holds never depends on it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    index: int  # position in the grid of windows of this kind
    kind: str  # short | long
    tokens: list[int]


def grid(n_tokens: int, window: int) -> int:
    """Whole windows of `window` ids in a stream of n_tokens (a short tail is no window)."""
    return n_tokens // window


def window_tokens(text: Sequence[int], index: int, size: int) -> list[int]:
    return list(text[index * size : (index + 1) * size])


def grid_windows(text: Sequence[int], size: int, kind: str) -> list[Window]:
    """Every window of the grid, in grid order: what `python -m engine warm-reference` scores."""
    return [Window(i, kind, window_tokens(text, i, size)) for i in range(grid(len(text), size))]
