"""Deterministic weight file of the demo model (numpy only).

Format (all little-endian):
    b"EVDM" | uint32 header length | JSON header (UTF-8, sorted keys) | float32 arrays

The header holds the model config and, per tensor, its name, shape and byte
offset relative to the start of the array section.  We avoid zip/npz on
purpose: their member timestamps would make the bytes (and so the sha256 the
harness pins) differ between two generations of the same model.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"EVDM"

# Hyper-parameters of the one demo model; small enough that a bench run of a few
# hundred tokens takes well under a second on one CPU core.
DEFAULT_CONFIG: dict[str, Any] = {
    "vocab_size": 256,  # byte-level: token id == byte value
    "d_model": 128,
    "n_layers": 4,
    "n_heads": 4,
    "mlp_mult": 4,
    "rope_base": 10000.0,
    "norm_eps": 1e-5,
    "max_seq_len": 4096,
}


def _init_tensors(cfg: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    """Random weights, scaled so activations keep unit RMS through the residual
    stream and the output logits have a std of a few units (peaked softmax, so
    top-1 agreement between implementations is a meaningful signal)."""
    rng = np.random.default_rng(seed)
    d = int(cfg["d_model"])
    hidden = d * int(cfg["mlp_mult"])
    vocab = int(cfg["vocab_size"])

    def normal(shape: tuple[int, ...], std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    t: dict[str, np.ndarray] = {"tok_emb": normal((vocab, d), 1.0)}
    for i in range(int(cfg["n_layers"])):
        p = f"layers.{i}."
        # Norm gains near 1 with a little spread, so a bug that drops them shows.
        t[p + "attn_norm"] = (1.0 + normal((d,), 0.1)).astype(np.float32)
        # Weights are stored [in, out] so the forward pass is x @ W.
        # q/k get a larger gain so attention is fairly peaked and matters for the output.
        t[p + "wq"] = normal((d, d), 2.0 / np.sqrt(d))
        t[p + "wk"] = normal((d, d), 2.0 / np.sqrt(d))
        t[p + "wv"] = normal((d, d), 1.0 / np.sqrt(d))
        t[p + "wo"] = normal((d, d), 1.0 / np.sqrt(d))
        t[p + "mlp_norm"] = (1.0 + normal((d,), 0.1)).astype(np.float32)
        t[p + "w1"] = normal((d, hidden), 1.0 / np.sqrt(d))
        t[p + "w2"] = normal((hidden, d), 1.0 / np.sqrt(hidden))
    t["final_norm"] = (1.0 + normal((d,), 0.1)).astype(np.float32)
    # Separate (untied) head; std 3/sqrt(d) on unit-RMS input gives logit std ~3.
    t["lm_head"] = normal((d, vocab), 3.0 / np.sqrt(d))
    return t


def write_weights(path: Path, seed: int = 1234) -> str:
    """Write the demo model to `path` and return the file's sha256 hex digest."""
    cfg = dict(DEFAULT_CONFIG, seed=seed)
    tensors = _init_tensors(cfg, seed)
    entries: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    offset = 0
    for name, arr in tensors.items():  # dict order is insertion order: deterministic
        blob = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        entries.append({"name": name, "shape": list(arr.shape), "offset": offset})
        blobs.append(blob)
        offset += len(blob)
    header = json.dumps({"config": cfg, "tensors": entries}, sort_keys=True).encode("utf-8")
    data = MAGIC + struct.pack("<I", len(header)) + header + b"".join(blobs)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def read_weights(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read a file written by `write_weights`: (config, name -> float32 array)."""
    data = Path(path).read_bytes()
    if data[:4] != MAGIC:
        raise ValueError(f"{path}: not an EVDM weight file (bad magic {data[:4]!r})")
    (header_len,) = struct.unpack_from("<I", data, 4)
    header = json.loads(data[8 : 8 + header_len].decode("utf-8"))
    base = 8 + header_len
    tensors: dict[str, np.ndarray] = {}
    for entry in header["tensors"]:
        count = int(np.prod(entry["shape"], dtype=np.int64))
        arr = np.frombuffer(data, dtype="<f4", count=count, offset=base + int(entry["offset"]))
        tensors[entry["name"]] = arr.reshape(entry["shape"]).astype(np.float32)
    return header["config"], tensors
