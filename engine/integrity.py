"""`python -m engine.integrity DIR`: a hash of the harness tree, computed the same way on both ends."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path


def tree_sha256(root: Path) -> str:
    """sha256 over sorted (relative path, content) of every file, caches excluded."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if "__pycache__" in rel or rel.endswith(".pyc"):
            continue
        digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


if __name__ == "__main__":
    print(tree_sha256(Path(sys.argv[1])))
