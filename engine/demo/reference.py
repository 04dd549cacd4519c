"""Float64 reference scorer of the demo model (the harness's "llama.cpp").

It lives with the harness, not in the engine repository under test, so a PR
cannot change what "correct" means.  It is an independent, deliberately plain
implementation (no KV cache, one full causal forward per window) of the same
architecture as the demo engine's main commit, computed in float64.

    python -m engine.demo.reference score --model PATH --tokens TOKENS.json \
        --topk 8 --out OUT.json
    python -m engine.demo.reference tokenize --model PATH --text TEXT.txt --out IDS.json

`tokenize` is the demo model's tokenizer (the profile's correctness.tokenize_argv): its vocabulary
is the 256 byte values, so the ids are the bytes of the text, written as a JSON list of ints.

TOKENS.json is the harness's tokens file: a list of windows, or {"windows": [...],
"score_from": [...]} when a window is scored from a position on (a long window of a profile with
`long_scored: deep`): its output then holds positions from that one on, as the sides' do.

Output format is the engine's `score` format:
    {"windows": [{"top": [[[id, logprob], ...], ...], "target_lp": [...], "argmax": [...]}]}

numpy only, like the rest of `engine`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .weights import read_weights


def _rms_norm(x: np.ndarray, gain: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gain


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - np.max(x, axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def _rope(x: np.ndarray, base: float) -> np.ndarray:
    """Rotate-half RoPE on [heads, T, head_dim], positions 0..T-1."""
    n, head_dim = x.shape[-2], x.shape[-1]
    half = head_dim // 2
    inv_freq = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    angles = np.arange(n, dtype=np.float64)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate((x1 * cos - x2 * sin, x1 * sin + x2 * cos), axis=-1)


def reference_logits(cfg: dict[str, Any], w: dict[str, np.ndarray],
                     tokens: list[int]) -> np.ndarray:
    """Float64 logits [T, vocab] of one window scored from an empty context."""
    n_heads = int(cfg["n_heads"])
    d = int(cfg["d_model"])
    hd = d // n_heads
    eps = float(cfg["norm_eps"])
    base = float(cfg["rope_base"])
    n = len(tokens)
    future = np.triu(np.ones((n, n), dtype=bool), k=1)
    x = w["tok_emb"][np.array(tokens, dtype=np.int64)]
    for i in range(int(cfg["n_layers"])):
        p = f"layers.{i}."
        h = _rms_norm(x, w[p + "attn_norm"], eps)
        q, k, v = ((h @ w[p + m]).reshape(n, n_heads, hd).transpose(1, 0, 2)
                   for m in ("wq", "wk", "wv"))
        q, k = _rope(q, base), _rope(k, base)
        scores = np.where(future, -np.inf, (q @ k.transpose(0, 2, 1)) / math.sqrt(hd))
        probs = np.exp(_log_softmax(scores))
        x = x + (probs @ v).transpose(1, 0, 2).reshape(n, d) @ w[p + "wo"]
        h = _rms_norm(x, w[p + "mlp_norm"], eps)
        up = h @ w[p + "w1"]
        x = x + (up / (1.0 + np.exp(-up))) @ w[p + "w2"]
    return _rms_norm(x, w["final_norm"], eps) @ w["lm_head"]


def score_windows(model_path: Path, windows: list[list[int]], topk: int,
                  froms: list[int] | None = None) -> dict[str, Any]:
    """Score every window; position i of a window predicts its token i + 1. A window scored from
    position f gives positions f.. only (the whole window is still its context)."""
    cfg, arrays = read_weights(model_path)
    w = {name: a.astype(np.float64) for name, a in arrays.items()}
    out: list[dict[str, Any]] = []
    for win, first in zip(windows, froms or [0] * len(windows), strict=True):
        if len(win) < 2 or not 0 <= first < len(win) - 1:
            raise ValueError("every token window needs at least 2 tokens, scored from a "
                             "position before its last")
        lp = _log_softmax(reference_logits(cfg, w, win)[first:-1])
        top_id = np.argsort(-lp, axis=-1, kind="stable")[:, :topk]
        top_lp = np.take_along_axis(lp, top_id, axis=-1)
        target = lp[np.arange(len(lp)), np.array(win[first + 1:], dtype=np.int64)]
        out.append({
            "top": [[[int(i), float(v)] for i, v in zip(ids, vals, strict=True)]
                    for ids, vals in zip(top_id.tolist(), top_lp.tolist(), strict=True)],
            "target_lp": [float(v) for v in target.tolist()],
            "argmax": [int(v) for v in np.argmax(lp, axis=-1).tolist()],
        })
    return {"windows": out}


def _read_windows(path: Path) -> tuple[list[list[int]], list[int]]:
    """The windows of a tokens file and the first scored position of each."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict):
        windows, froms = data.get("windows"), data.get("score_from")
        if not isinstance(windows, list) or not isinstance(froms, list) or \
                len(windows) != len(froms) or not all(type(f) is int for f in froms):
            raise ValueError(f"{path}: expected windows and a score_from per window")
        return windows, froms
    if not isinstance(data, list) or not data:
        raise ValueError(f"{path}: expected a non-empty JSON list of token ids")
    windows = data if isinstance(data[0], list) else [data]
    return windows, [0] * len(windows)


def tokenize(model_path: Path, text_path: Path) -> list[int]:
    """One id per byte, checked against the model's vocabulary (it must hold every byte)."""
    cfg, _ = read_weights(model_path)
    if int(cfg["vocab_size"]) < 256:
        raise ValueError(f"{model_path}: vocabulary of {cfg['vocab_size']} is not byte-level")
    return list(Path(text_path).read_bytes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.demo.reference")
    sub = parser.add_subparsers(dest="command", required=True)
    score = sub.add_parser("score", help="float64 teacher-forced top-k log-probs")
    score.add_argument("--model", type=Path, required=True)
    score.add_argument("--tokens", type=Path, required=True)
    score.add_argument("--topk", type=int, default=8)
    score.add_argument("--out", type=Path, required=True)
    tok = sub.add_parser("tokenize", help="the text's token ids (the byte values)")
    tok.add_argument("--model", type=Path, required=True)
    tok.add_argument("--text", type=Path, required=True)
    tok.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "tokenize":
        Path(args.out).write_text(json.dumps(tokenize(args.model, args.text)))
        return 0

    windows, froms = _read_windows(args.tokens)
    result = score_windows(args.model, windows, args.topk, froms)
    Path(args.out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
