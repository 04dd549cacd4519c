"""The scored model's vocabulary size, read from the model file (trusted: pinned by sha256).

A dump's token ids must lie inside it: a dump from another vocabulary (another tokenizer, a
shifted id table) would otherwise read as "top-1 fell 100 points" instead of a refused dump.
GGUF files: the length of `tokenizer.ggml.tokens` (or `<arch>.vocab_size`). The demo's EVDM
files: `vocab_size` of the JSON header. Other files: unknown (None), and only the contract's
int32 range is checked.
"""

from __future__ import annotations

import json
import struct
from functools import lru_cache
from typing import Any, BinaryIO

import numpy as np

# GGUF value types -> fixed byte sizes (8: string and 9: array are variable)
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_MAX_KV = 1 << 16  # a header with more keys than this is not one we read


@lru_cache(maxsize=16)
def vocab_size(model: str) -> int | None:
    try:
        with open(model, "rb") as f:
            magic = f.read(4)
            if magic == b"GGUF":
                return _gguf(f)
            if magic == b"EVDM":
                (n,) = struct.unpack("<I", f.read(4))
                return int(json.loads(f.read(n))["config"]["vocab_size"])
    except (OSError, ValueError, KeyError, struct.error):
        return None
    return None


def _gguf(f: BinaryIO) -> int | None:
    _version, _tensors, n_kv = struct.unpack("<IQQ", f.read(20))
    for _ in range(min(n_kv, _MAX_KV)):
        key = _string(f)
        (kind,) = struct.unpack("<I", f.read(4))
        if kind == 9:
            elem, count = struct.unpack("<IQ", f.read(12))
            if key == "tokenizer.ggml.tokens":
                return int(count)
            _skip(f, elem, count)
        elif key.endswith(".vocab_size") and kind in (4, 5, 10, 11):
            fmt = {4: "<I", 5: "<i", 10: "<Q", 11: "<q"}[kind]
            return int(struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0])
        else:
            _skip(f, kind, 1)
    return None


def _string(f: BinaryIO) -> str:
    (n,) = struct.unpack("<Q", f.read(8))
    return f.read(n).decode("utf-8", "replace")


def _skip(f: BinaryIO, kind: int, count: int) -> None:
    if kind == 8:
        for _ in range(count):
            (n,) = struct.unpack("<Q", f.read(8))
            f.seek(n, 1)
    elif kind in _SIZES:
        f.seek(_SIZES[kind] * count, 1)
    else:
        raise ValueError(f"GGUF value type {kind} inside an array")


def out_of_vocabulary(windows: list[dict[str, Any]], vocab: int) -> str:
    """The first id of a checked dump (engine/contract/score_dump.py) outside [0, vocab), said
    with its window and position, or "" when there is none."""
    for w, window in enumerate(windows):
        if not window["top"]:
            continue
        ids = np.array([[e[0] for e in row] for row in window["top"]], dtype=np.int64)
        argmax = np.array(window["argmax"], dtype=np.int64)
        bad = np.flatnonzero((ids >= vocab).any(1) | (argmax >= vocab))
        if bad.size:
            p = int(bad[0])
            token = max(int(ids[p].max()), int(argmax[p]))
            return (f"window {w} position {p}: token id {token} is outside the model's "
                    f"vocabulary of {vocab} ids (a dump from another vocabulary?)")
    return ""
