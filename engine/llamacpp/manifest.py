"""The reference build's manifest: what was built from which pinned source, with artifact hashes.

Written by engine/llamacpp/reference_build.py next to the artifacts; checked before every use, so a
reference build that changed on disk (or a directory someone filled by hand) is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..contract.integrity import file_sha256

MANIFEST = "manifest.json"
TOOL = "evalbot-topk"


class ManifestError(Exception):
    """The reference build is missing, incomplete or not what its manifest says."""


def write_manifest(out: Path, source: dict[str, Any], flags: list[str]) -> dict[str, Any]:
    artifacts = {p.name: file_sha256(p) for p in sorted(out.iterdir())
                 if p.is_file() and p.name != MANIFEST}
    doc = {"schema": "evalbot.llamacpp-reference/1", "source": source, "flags": flags,
           "artifacts": artifacts}
    (out / MANIFEST).write_text(json.dumps(doc, indent=2, sort_keys=True))
    return doc


def verified_tool(ref_dir: Path) -> Path:
    """The reference's top-k tool, after checking every artifact against the manifest."""
    path = ref_dir / MANIFEST
    if not path.is_file():
        raise ManifestError(f"no llama.cpp reference build at {ref_dir} (run "
                            "python -m evalbot.engine.llamacpp.reference_build first)")
    try:
        artifacts = json.loads(path.read_text())["artifacts"]
    except (ValueError, KeyError) as exc:
        raise ManifestError(f"{path}: unreadable manifest: {exc}") from exc
    if TOOL not in artifacts:
        raise ManifestError(f"{path}: the manifest lists no {TOOL}")
    for name, expected in artifacts.items():
        if not (ref_dir / name).is_file() or file_sha256(ref_dir / name) != expected:
            raise ManifestError(f"reference artifact {name} does not match its manifest")
    return ref_dir / TOOL
