"""The score contract, checked: one side's top-k dump, refused unless every position is sound.

A dump is, per window, {"top": [[[id, logprob], ...] per position], "argmax": [...]}. It comes
from the engine's or the reference's score tool (for the head, code of the PR), so nothing in it
is taken on trust: a position is refused (never repaired, never skipped) when

- its top list has fewer than k entries, an entry that is not an [id, logprob] pair, an id that
  is not a token id, or the same id twice (a repeated id would count its mass twice);
- a log-probability is not finite (NaN, +-inf) or above 0, or the entries' probabilities sum
  to more than 1 (they are shares of one softmax);
- its argmax is not the id of the highest log-probability (ties allowed).

Entries are sorted (highest first, then lowest id) before the first k are kept, so a tool that
prints more than k, or prints them unordered, is read the same as one that prints exactly k.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

MAX_ID = 2**31  # token ids are int32 in every tool the harness drives
LOGPROB_SLACK = 1e-4  # printed log-probabilities are rounded: 0.00005 above 0 is rounding
MASS_SLACK = 1e-3  # ... and so is a sum of probabilities a hair above 1
TIE_NATS = 1e-6  # an argmax within this of the top is a tie, not a disagreement


class DumpError(ValueError):
    """A dump that breaks the score contract; the message names the window and position."""


def check_windows(windows: Any, topk: int, lengths: Sequence[int] | None = None
                  ) -> list[dict[str, Any]]:
    """The dump's windows, each position checked and its top list sorted and cut to k.

    `lengths`: positions expected per window (the tokens asked for, minus one); a window with
    more or fewer is refused, as is a different number of windows.
    """
    if not isinstance(windows, list):
        raise DumpError(f"score output: windows is {type(windows).__name__}, not a list")
    if lengths is not None and len(windows) != len(lengths):
        raise DumpError(f"score output has {len(windows)} windows, {len(lengths)} were asked")
    out = []
    for w, window in enumerate(windows):
        if not isinstance(window, dict) or not isinstance(window.get("top"), list) or \
                not isinstance(window.get("argmax"), list):
            raise DumpError(f"window {w}: not an object with top and argmax lists")
        top, argmax = window["top"], window["argmax"]
        if len(top) != len(argmax):
            raise DumpError(f"window {w}: {len(top)} top lists but {len(argmax)} argmax values")
        if lengths is not None and len(top) != lengths[w]:
            raise DumpError(f"window {w}: {len(top)} positions, {lengths[w]} asked")
        checked = [check_position(entries, am, topk, f"window {w} position {i}")
                   for i, (entries, am) in enumerate(zip(top, argmax, strict=True))]
        out.append({"top": [c[0] for c in checked], "argmax": [c[1] for c in checked]})
    return out


def check_rows(rows: Any, topk: int, length: int) -> list[dict[str, Any]]:
    """One window as the harness keeps it (a list of {"top", "argmax"} per position), checked."""
    if not isinstance(rows, list) or not all(isinstance(p, dict) for p in rows):
        raise DumpError("not a list of positions")
    [checked] = check_windows([{"top": [p.get("top") for p in rows],
                                "argmax": [p.get("argmax") for p in rows]}], topk, [length])
    return [{"top": top, "argmax": am}
            for top, am in zip(checked["top"], checked["argmax"], strict=True)]


def tokens_doc(windows: list[list[int]], froms: list[int]) -> Any:
    """What a score command reads: a list of windows, or, when some window is scored only from
    a position on, {"windows": [...], "score_from": [...]} (docs/profiles.md, score contract)."""
    return {"windows": windows, "score_from": froms} if any(froms) else windows


def check_position(entries: Any, argmax: Any, topk: int,
                   where: str) -> tuple[list[list[Any]], int]:
    """One position: the sorted first k [id, logprob] entries and the argmax, or DumpError."""
    if not isinstance(entries, list) or len(entries) < topk:
        got = len(entries) if isinstance(entries, list) else type(entries).__name__
        raise DumpError(f"{where}: {got} top entries, {topk} needed")
    pairs = [_entry(e, where) for e in entries]
    ids = [i for i, _ in pairs]
    if len(set(ids)) != len(ids):
        raise DumpError(f"{where}: token id {_repeated(ids)} appears twice in the top list")
    if math.fsum(math.exp(lp) for _, lp in pairs) > 1 + MASS_SLACK:
        raise DumpError(f"{where}: the top entries' probabilities sum to more than 1")
    pairs.sort(key=lambda e: (-e[1], e[0]))
    am = _token(argmax, f"{where}: argmax")
    best = pairs[0][1]
    if not any(i == am and lp >= best - TIE_NATS for i, lp in pairs):
        raise DumpError(f"{where}: argmax {am} is not the top entry ({pairs[0][0]})")
    return [[i, lp] for i, lp in pairs[:topk]], am


def _entry(entry: Any, where: str) -> tuple[int, float]:
    if not isinstance(entry, (list, tuple)) or len(entry) != 2:
        raise DumpError(f"{where}: top entry {entry!r:.60} is not an [id, logprob] pair")
    token = _token(entry[0], f"{where}: top id")
    lp = entry[1]
    if isinstance(lp, bool) or not isinstance(lp, (int, float)) or not math.isfinite(lp):
        raise DumpError(f"{where}: log-probability {lp!r:.40} of token {token} is not finite")
    if lp > LOGPROB_SLACK:
        raise DumpError(f"{where}: log-probability {lp} of token {token} is above 0")
    return token, min(float(lp), 0.0)


def _token(value: Any, where: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a JSON writer may print 17.0
    if type(value) is not int or not 0 <= value < MAX_ID:
        raise DumpError(f"{where} {value!r:.40} is not a token id (an int in [0, 2^31))")
    return value


def _repeated(ids: list[int]) -> int:
    seen: set[int] = set()
    for i in ids:
        if i in seen:
            return i
        seen.add(i)
    return -1
