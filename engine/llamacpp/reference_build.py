"""Build the pinned llama.cpp reference on the box, from a source verified before use.

    python -m evalbot.engine.llamacpp.reference_build --models-dir DIR --key KEY
        (--tarball SRC.tar.gz --sha256 HEX | --git REPO --commit SHA)
        [--backend cuda|cpu] [--cuda-arch 90] [--jobs N] [--shared-build DIR]

The source is either a tarball the maintainer provides offline (its sha256 is checked before it
is unpacked) or a git commit (checked out by SHA; the resolved full SHA must start with the pin).
The build (llama-bench and evalbot-topk, engine/llamacpp/build.py) lands in
DIR/llamacpp-reference/KEY/ with a manifest of artifact hashes, where the profile's
reference_argv (`score.py --reference KEY`) finds and re-verifies it. Model files and the
reference live together: both are pinned by hash and checked from outside the sandbox.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from ..contract.integrity import file_sha256
from .build import build, cmake_flags
from .manifest import write_manifest


class SourceError(Exception):
    pass


def from_tarball(tarball: Path, pin: str, dest: Path) -> dict[str, str]:
    got = file_sha256(tarball)
    if got != pin.lower():
        raise SourceError(f"{tarball.name}: sha256 {got} does not match the pin {pin}")
    with tarfile.open(tarball) as tar:
        tar.extractall(dest, filter="data")
    return {"kind": "tarball", "sha256": got}


def from_git(repo: str, commit: str, dest: Path) -> dict[str, str]:
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise SourceError(f"commit pin {commit!r} is not a hex SHA")
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", repo, str(dest)], check=True)
    subprocess.run(["git", "-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach",
                    commit], cwd=dest, check=True)
    full = subprocess.run(["git", "rev-parse", "HEAD"], cwd=dest, check=True,
                          capture_output=True, text=True).stdout.strip()
    if not full.startswith(commit):
        raise SourceError(f"checked out {full}, pinned {commit}")
    return {"kind": "git", "commit": full}


def llama_root(tree: Path) -> Path:
    """The llama.cpp tree inside what was unpacked (itself, one level down, or vendor/)."""
    for cand in [tree, *sorted(tree.glob("*")), *sorted(tree.glob("*/vendor/llama.cpp"))]:
        if (cand / "include" / "llama.h").is_file():
            return cand
    raise SourceError("the source holds no llama.cpp tree (include/llama.h)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="engine.llamacpp.reference_build")
    ap.add_argument("--models-dir", type=Path, required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--tarball", type=Path)
    ap.add_argument("--sha256")
    ap.add_argument("--git")
    ap.add_argument("--commit")
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--cuda-arch", default="90")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--shared-build", type=Path)
    ap.add_argument("--cmake-flag", action="append", default=[])
    a = ap.parse_args(argv)
    if not re.fullmatch(r"[A-Za-z0-9._-]+", a.key):
        ap.error("--key must be a plain name")
    if bool(a.tarball) == bool(a.git) or bool(a.tarball) != bool(a.sha256) or \
            bool(a.git) != bool(a.commit):
        ap.error("give either --tarball with --sha256, or --git with --commit")
    out = a.models_dir / "llamacpp-reference" / a.key
    with tempfile.TemporaryDirectory(prefix="evalbot-ref-") as tmp:
        try:
            source = (from_tarball(a.tarball, a.sha256, Path(tmp) / "src") if a.tarball
                      else from_git(a.git, a.commit, Path(tmp) / "src"))
            tree = llama_root(Path(tmp) / "src")
            staging = Path(tmp) / "out"
            build(tree, staging, a.backend, a.cuda_arch, a.jobs, a.shared_build, a.cmake_flag)
        except (SourceError, subprocess.CalledProcessError) as exc:
            print(f"reference build failed: {exc}", file=sys.stderr)
            return 1
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(staging, out)
    doc = write_manifest(out, source, cmake_flags(a.backend, a.cuda_arch, a.cmake_flag))
    print(f"reference {a.key}: {doc['source']} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
