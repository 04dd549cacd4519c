"""The demo engine's driver, shipped with the harness: every process of a demo build starts here.

    python driver.py ENGINE ARGS...      (ENGINE: the build's `build/demo_engine.py`)

It imports the build's module the same way in every process, then:

- **a witness** (its stdin is a pipe: the harness's handoff, docs/trust.md): loads the model with
  the module's `load_weights` and `Model`, warms up, prints EVALBOT_READY, reads the prompt line
  and answers it, then each id line, with `EVALBOT_STEP <argmax> <runner-up> <margin>` computed
  here from the logits the module's `Model.forward` returned, until stdin closes. Nothing of the
  engine's own commands runs: no `main`, no subcommand;
- **anything else** (a bench or a score run; its stdin is /dev/null): the engine's own command,
  `main(ARGS)`.

One driver for both, and a witness argv that is the bench's word for word (the demo profile), so
the module cannot tell a witness from a bench by what it sees when it is imported: the same
sys.argv, sys.orig_argv and /proc/self/cmdline, the same environment, the same module name and
importer (this file as `__main__`, the same import path), the same sys.path. What still tells
them apart is listed in docs/trust.md ("What a demo module can still tell").

Stdlib and numpy only; it imports nothing of the harness (it runs as the sandbox user).
"""

from __future__ import annotations

import importlib.util
import os
import stat
import sys
from pathlib import Path
from typing import Any

import numpy as np

READY = "EVALBOT_READY"  # engine/contract/witness_spec.py's READY and STEP
STEP = "EVALBOT_STEP"
WARM_IDS = 16  # a warm-up prefill of this many ids and two single steps, before READY


def load(engine: Path, args: list[str]) -> Any:
    """Import the engine module as running it directly would set the process up: its argv,
    its directory first on sys.path (in place of this file's), its own name."""
    here = str(Path(__file__).resolve().parent)
    if sys.path and os.path.realpath(sys.path[0] or ".") == here:
        sys.path[0] = str(engine.parent)
    else:
        sys.path.insert(0, str(engine.parent))
    sys.argv = [str(engine), *args]
    spec = importlib.util.spec_from_file_location(engine.stem, engine)
    if spec is None or spec.loader is None:
        raise SystemExit(f"driver: cannot import {engine}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[engine.stem] = module
    spec.loader.exec_module(module)
    return module


def fed_by_the_harness() -> bool:
    """A witness's stdin is the handoff's pipe; a bench or score run's is /dev/null."""
    return stat.S_ISFIFO(os.fstat(0).st_mode)


def option(args: list[str], name: str) -> str:
    """The value of `--name VALUE` or `--name=VALUE` in the engine's arguments."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg[len(name) + 1:]
    raise SystemExit(f"driver: no {name} in the engine's arguments")


def read_ids(vocab: int) -> list[int] | None:
    """One line of ids from the harness; None once it closed stdin (the witness is done)."""
    line = sys.stdin.readline()
    if not line:
        return None
    ids = [int(t) for t in line.split()]
    if not ids or not all(0 <= t < vocab for t in ids):
        raise SystemExit(f"driver: expected ids in [0, {vocab}), got {line.strip()[:80]!r}")
    return ids


def answer(logits: Any, fed: int, vocab: int) -> None:
    """The step's argmax, runner-up and top-1 minus top-2 margin, from the module's logits
    for the ids just fed (one row per id): a forward that returned anything else fails."""
    rows = np.asarray(logits)
    if rows.ndim != 2 or rows.shape != (fed, vocab) or not np.all(np.isfinite(rows[-1])):
        raise SystemExit(f"driver: forward returned logits of shape {rows.shape}, expected "
                         f"{(fed, vocab)} finite")
    last = rows[-1].astype(np.float64)
    top = int(np.argmax(last))
    second = int(np.argmax(np.where(np.arange(vocab) == top, -np.inf, last)))
    print(f"{STEP} {top} {second} {last[top] - last[second]:.6g}", flush=True)


def witness(module: Any, model_path: Path) -> int:
    """The handoff: the module's forward on the harness's ids, one step per line."""
    cfg, weights = module.load_weights(model_path)
    model = module.Model(cfg, weights)
    capacity, vocab = int(cfg["max_seq_len"]), int(cfg["vocab_size"])
    warm = model.new_cache(WARM_IDS + 2)
    warm_ids = np.arange(WARM_IDS, dtype=np.int64) * 7 % vocab
    for warm_feed in (warm_ids, warm_ids[:1], warm_ids[1:2]):
        model.forward(warm_feed, warm)
    cache = model.new_cache(capacity)  # made before READY: not timed, as the bench's
    print(READY, flush=True)
    used = 0
    while (ids := read_ids(vocab)) is not None:
        used += len(ids)
        if used > capacity:
            raise SystemExit(f"driver: {used} ids exceed the model's {capacity} positions")
        answer(model.forward(np.array(ids, dtype=np.int64), cache), len(ids), vocab)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        raise SystemExit("usage: driver.py ENGINE ARGS...")
    engine, args = Path(argv[0]), argv[1:]
    module = load(engine, args)
    if fed_by_the_harness():
        return witness(module, Path(option(args, "--model")))
    return int(module.main(args) or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
