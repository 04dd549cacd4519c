"""The reference's top-k log-probabilities of each grid window, cached on the box.

A window's reference depends only on its tokens and on what `cache_key` names, never on the
seed (which only picks windows), so an entry serves every later evaluation on the box, and
`python -m engine warm-reference` (engine/harness/warm_reference.py) can fill the cache with the
whole grid before any PR. Entries are the harness's alone (engine/sandbox/safe_io.py: 0700
folders, a sha256 manifest), and each is checked again when read: the score contract
(engine/contract/score_dump.py `check_rows`, its positions exactly those asked) and the model's
vocabulary. An entry that fails either is a miss and is scored again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..contract.job import Correctness, Job, Model
from ..contract.score_dump import DumpError, check_rows, tokens_doc
from ..contract.shared.segments import scored_from
from ..sandbox import safe_io
from .score_run import run_score
from .tokens import OUTPUT_CAP, Stream, scored_model
from .vocab import out_of_vocabulary, vocab_size
from .windows import Window

Key = tuple[str, int]  # a window's (kind, index in its grid)


def cache_key(model_sha256: str, recipe: Sequence[str], text_version: str, window_tokens: int,
              topk: int, first_scored: int, device: str, build: str = "") -> str:
    """The folder of one kind of window's entries: a hash of everything their numbers depend
    on. `first_scored` > 0: entries hold positions from it on only, so they are never read as
    whole windows, nor the reverse. `device`: CUDA and CPU builds of one reference disagree.
    `build`: the reference build's identity (`reference_build`): a build carried to the box and
    one built there from the same commit need not agree to the last bit."""
    doc = [model_sha256, list(recipe), text_version, window_tokens, topk, first_scored, device,
           build]
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:24]


def reference_build(recipe: Sequence[str], model_path: str) -> str:
    """The digest of the artifacts the pinned llama.cpp reference's manifest lists (a recipe
    `... --reference KEY ...`: MODELS_DIR/llamacpp-reference/KEY/manifest.json, as
    engine/llamacpp/score.py finds it), or "" for a recipe with no such build (its scorer's
    code is the harness's, already in the recipe's path). The manifest is checked against the
    artifacts when the reference runs; an unreadable one here is a miss-only key ("unread")."""
    args = list(recipe)
    if "--reference" not in args or args.index("--reference") + 1 >= len(args):
        return ""
    key = args[args.index("--reference") + 1]
    manifest = Path(model_path).parent / "llamacpp-reference" / key / "manifest.json"
    try:
        artifacts = json.loads(manifest.read_text())["artifacts"]
    except (OSError, ValueError, KeyError, TypeError):
        return "unread"
    return hashlib.sha256(json.dumps(artifacts, sort_keys=True).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class ReferenceCache:
    """The reference windows of the job's scored model (`job.correctness.model`) on this box."""

    job: Job
    stream: Stream  # the model's ids of the corpus and the long text
    device: str  # what the reference runs on (engine/measure/gpu.py device_identity)
    jobdir: Path  # where a reference run's inputs, output and log go
    harness: Path

    @property
    def spec(self) -> Correctness:
        assert self.job.correctness is not None
        return self.job.correctness

    @property
    def model(self) -> Model:
        return scored_model(self.job, self.spec)

    def references(self, windows: list[Window]) -> tuple[dict[Key, Any], dict[str, int]]:
        """Every window's reference rows, and how many were cached and how many scored now."""
        found = self.lookup(windows)
        missing = [w for w in windows if (w.kind, w.index) not in found]
        if missing:
            found |= self.score(missing)
        return found, {"cached": len(windows) - len(missing), "scored": len(missing)}

    def lookup(self, windows: list[Window]) -> dict[Key, Any]:
        """The windows whose entry is there and sound; any other is a miss."""
        found = {}
        for w in windows:
            rows = self._sound(safe_io.cache_get(self._entry(w), OUTPUT_CAP), w)
            if rows is not None:
                found[w.kind, w.index] = rows
        for kind in {kind for kind, _ in found}:  # housekeeping evicts a folder by its mtime:
            os.utime(self.folder(kind))  # a read is a use
        return found

    def score(self, windows: list[Window]) -> dict[Key, Any]:
        """Run the reference on `windows` (one process per kind) and cache each window."""
        out: dict[Key, Any] = {}
        for kind in ("long", "short"):
            todo = [w for w in windows if w.kind == kind]
            if not todo:
                continue
            firsts = [self.first_scored(w) for w in todo]
            doc = tokens_doc([w.tokens for w in todo], firsts)
            size = len(todo[0].tokens)
            tokens = safe_io.input_file(self.jobdir, f"reference-tokens-{size}.json",
                                        json.dumps(doc).encode())
            got = run_score(self.spec.reference_argv, "reference", f"reference-{size}",
                            self.spec, tokens, self.model.path, self.jobdir, self.harness,
                            self.harness, self.job.env, [self.positions(w) for w in todo],
                            vocab_size(self.model.path))
            for w, rows in zip(todo, got, strict=True):
                safe_io.cache_put(self._entry(w), rows)
                out[w.kind, w.index] = rows
        return out

    def folder(self, kind: str) -> Path:
        spec, stream = self.spec, self.stream
        size = spec.long_window_tokens if kind == "long" else spec.window_tokens
        version = stream.long_version if kind == "long" and stream.long_ids else stream.version
        key = cache_key(self.model.sha256, spec.reference_argv, version, size, spec.topk,
                        scored_from(spec, kind, size), self.device,
                        reference_build(spec.reference_argv, self.model.path))
        root = Path(self.job.cache_dir) if self.job.cache_dir else self.jobdir
        return root / "reference" / key

    def first_scored(self, window: Window) -> int:
        return scored_from(self.spec, window.kind, len(window.tokens))

    def positions(self, window: Window) -> int:
        """Rows of the window's reference: position i predicts token i + 1."""
        return len(window.tokens) - 1 - self.first_scored(window)

    def _entry(self, window: Window) -> Path:
        return self.folder(window.kind) / f"{window.index}.json"

    def _sound(self, rows: Any, window: Window) -> list[Any] | None:
        return sound_rows(rows, self.spec.topk, self.positions(window),
                          vocab_size(self.model.path))


def sound_rows(rows: Any, topk: int, positions: int, vocab: int | None) -> list[Any] | None:
    """A cache entry's rows, checked as a fresh dump is (the score contract, exactly
    `positions` of them, ids inside the vocabulary); None when it fails: a miss."""
    if rows is None:
        return None
    try:
        checked = check_rows(rows, topk, positions)
    except DumpError:
        return None
    dump = [{"top": [r["top"] for r in checked], "argmax": [r["argmax"] for r in checked]}]
    return None if vocab is not None and out_of_vocabulary(dump, vocab) else checked
