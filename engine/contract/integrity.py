"""`python -m engine.contract.integrity DIR`: a hash of the harness tree, computed the same way on both ends.

Also the models' check: every model file must hash to the sha256 pinned in the profile, checked
by the harness (outside the sandbox) before anything runs.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from pathlib import Path


class IntegrityError(RuntimeError):
    """A model or reference file is not the pinned one: the box is at fault, never the PR."""


def tree_sha256(root: Path) -> str:
    """sha256 over sorted (relative path, content) of every file, caches excluded."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if "__pycache__" in rel or rel.endswith(".pyc"):
            continue
        digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_files(pinned: Iterable[tuple[str, str, str]], cache: Path | None) -> None:
    """(name, path, sha256) each must match; hashes of unchanged files (same size and mtime)
    are remembered in `cache`, a file only the harness can write, so GBs are hashed once."""
    known = _load(cache)
    for name, path, expected in pinned:
        p = Path(path)
        try:
            st = p.stat()
        except OSError as exc:
            raise IntegrityError(f"model {name}: {path} is missing ({exc.strerror})") from exc
        key = f"{p.resolve()}:{st.st_size}:{st.st_mtime_ns}"
        got = known.get(key) or file_sha256(p)
        if got != expected:
            raise IntegrityError(f"model {name}: sha256 of {path} is {got[:16]}..., "
                                 f"pinned {expected[:16]}...")
        known[key] = got
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(known, sort_keys=True))


def _load(cache: Path | None) -> dict[str, str]:
    if cache is None or not cache.is_file():
        return {}
    try:
        doc = json.loads(cache.read_text())
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


if __name__ == "__main__":
    print(tree_sha256(Path(sys.argv[1])))
