"""Main's score rows of each window, cached on the box per build of main.

What main's score command prints for a window depends on main's build (its artifacts, hashed when
built: engine/sides/build.py), the score command, the box's environment, the model, k and the
device, never on the PR, so every evaluation against the same build of main after the first
reads main's side from here instead of running it (about half of the correctness stage). The
head is always scored fresh: its scores are what the evaluation is about. Entries are written from
main's runs only, keyed by the window's ids and its first scored position (the seed picks which
windows, a decode cell's prefix is a window too), and are the harness's alone like the
reference's (engine/sandbox/safe_io.py: a 0700 cache under the box's 0700 cache folder, a sha256
manifest). Each is checked again when read as a fresh dump is: the score contract
(engine/contract/score_dump.py `check_rows`, exactly the positions asked) and the vocabulary; an
entry that fails either is a miss and is scored again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..contract.job import Job, Model
from ..sandbox import safe_io
from ..sides.build import Built
from .reference_cache import sound_rows
from .tokens import OUTPUT_CAP

FOLDER = "main-scores"  # under the box's cache folder (engine/harness/housekeeping.py evicts it)
# the rows of the windows asked (by their place in the list), scored now by main's command
Scorer = Callable[[list[int]], list[Any]]


def _digest(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class MainScores:
    folder: Path
    topk: int
    vocab: int | None

    @classmethod
    def on_box(cls, job: Job, main: Built, model: Model, device: str,
               vocab: int | None) -> MainScores | None:
        """Main's cache on this box; None where the job has no cache folder (a one-off run) or
        main's build recorded no artifact hashes (nothing would tell two builds apart)."""
        spec = job.correctness
        if not job.cache_dir or spec is None or not main.hashes:
            return None
        key = _digest([model.sha256, list(spec.score_argv), main.hashes, job.env, spec.topk,
                       device])
        return cls(Path(job.cache_dir) / FOLDER / key, spec.topk, vocab)

    def scores(self, windows: Sequence[Sequence[int]], froms: Sequence[int],
               score: Scorer) -> tuple[list[Any], dict[str, int]]:
        """Main's rows of every window, from the cache or scored now (and cached); with how many
        windows came from each."""
        rows: list[Any] = [self._get(w, f) for w, f in zip(windows, froms, strict=True)]
        missing = [i for i, got in enumerate(rows) if got is None]
        if missing:
            for i, got in zip(missing, score(missing), strict=True):
                safe_io.cache_put(self._entry(windows[i], froms[i]), got)
                rows[i] = got
        if len(missing) < len(rows):
            os.utime(self.folder)  # housekeeping evicts by the folder's mtime: a read is a use
        return rows, {"cached": len(rows) - len(missing), "scored": len(missing)}

    def _entry(self, window: Sequence[int], first: int) -> Path:
        return self.folder / f"{_digest([list(window), first])}.json"

    def _get(self, window: Sequence[int], first: int) -> list[Any] | None:
        return sound_rows(safe_io.cache_get(self._entry(window, first), OUTPUT_CAP), self.topk,
                          len(window) - 1 - first, self.vocab)
