"""Build a llama.cpp tree with `llama-bench` and our top-k tool; the profile's build command.

    python -m engine.llamacpp.build --tree DIR [--backend cpu|cuda] [--cuda-arch 90]
                                   [--jobs N] [--shared-build DIR]

A small CMake wrapper project adds the tree as a subdirectory and compiles `topk.cpp` against its
`llama` target, so the tool is built from the harness's source against the code under test and
the tree itself is never edited. Libraries are static: the two artifacts under
`{tree}/evalbot-out/` are self-contained and can be copied out per SHA.

`--shared-build DIR` keeps one source mirror and one build directory across SHAs: files whose
content differs are copied into the mirror (unchanged files keep their timestamps), so ninja
recompiles only what the commit changed (a one-file CUDA change: ~40 s instead of ~5 min on the
H200 box). It trades isolation for speed: a build can leave objects behind for the next one, so
use it only on a box whose config trusts the engine's PRs (docs/gpu-e2e.md).
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT_DIR = "evalbot-out"
ARTIFACTS = ("llama-bench", "evalbot-topk")
WRAPPER = """cmake_minimum_required(VERSION 3.14)
project(evalbot_llamacpp C CXX)
add_subdirectory("${LLAMA_SRC}" llama.cpp)
add_executable(evalbot-topk topk.cpp)
target_link_libraries(evalbot-topk PRIVATE llama)
target_compile_features(evalbot-topk PRIVATE cxx_std_17)
"""


def cmake_flags(backend: str, cuda_arch: str, extra: list[str] | None = None) -> list[str]:
    flags = ["-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
             "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF",
             "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_COMMON=ON", "-DLLAMA_CURL=OFF",
             "-DLLAMA_OPENSSL=OFF", "-DGGML_NATIVE=OFF"]
    if backend == "cuda":
        flags += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch}"]
    for flag in extra or []:
        if not flag.startswith("-D") or " " in flag:
            raise SystemExit(f"--cmake-flag {flag!r}: only -DNAME=VALUE")
        flags.append(flag)
    return flags


def mirror(src: Path, dest: Path) -> int:
    """Make dest's files equal src's (git metadata excluded); return how many were copied."""
    copied = 0
    dest.mkdir(parents=True, exist_ok=True)
    wanted: set[Path] = set()
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d != ".git" and not (root == str(src) and d == OUT_DIR)]
        rel_root = Path(root).relative_to(src)
        for name in files:
            rel = rel_root / name
            wanted.add(rel)
            target = dest / rel
            if target.is_file() and filecmp.cmp(src / rel, target, shallow=False):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / rel, target)
            copied += 1
    for root, _, files in os.walk(dest):
        for name in files:
            rel = Path(root).relative_to(dest) / name
            if rel not in wanted:
                (dest / rel).unlink()
    return copied


def run(argv: list[str], cwd: Path) -> None:
    print("+", " ".join(argv), flush=True)
    subprocess.run(argv, cwd=cwd, check=True)


def build(tree: Path, out: Path, backend: str, cuda_arch: str, jobs: int,
          shared: Path | None, extra: list[str] | None = None) -> list[Path]:
    """Build into `out`; returns the artifact paths."""
    if not (tree / "include" / "llama.h").is_file():
        raise SystemExit(f"{tree} is not a llama.cpp tree (no include/llama.h)")
    work = shared if shared else tree / "build-evalbot"
    src = tree
    if shared:
        src = shared / "src"
        print(f"mirror: {mirror(tree, src)} files changed", flush=True)
    wrapper = work / "wrapper"
    wrapper.mkdir(parents=True, exist_ok=True)
    if not (wrapper / "CMakeLists.txt").is_file() or \
            (wrapper / "CMakeLists.txt").read_text() != WRAPPER:  # an mtime change re-configures
        (wrapper / "CMakeLists.txt").write_text(WRAPPER)
    if not (wrapper / "topk.cpp").is_file() or not filecmp.cmp(HERE / "topk.cpp",
                                                               wrapper / "topk.cpp", False):
        shutil.copyfile(HERE / "topk.cpp", wrapper / "topk.cpp")
    bdir = work / "build"
    if not (bdir / "build.ninja").is_file():
        run(["cmake", "-S", str(wrapper), "-B", str(bdir), f"-DLLAMA_SRC={src}",
             *cmake_flags(backend, cuda_arch, extra)], cwd=work)
    run(["cmake", "--build", str(bdir), "--target", *ARTIFACTS, "-j", str(jobs)], cwd=work)
    out.mkdir(parents=True, exist_ok=True)
    found = []
    for name in ARTIFACTS:
        hits = [p for p in bdir.rglob(name) if p.is_file() and os.access(p, os.X_OK)]
        if len(hits) != 1:
            raise SystemExit(f"expected one built {name}, found {len(hits)}")
        shutil.copy2(hits[0], out / name)
        found.append(out / name)
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="engine.llamacpp.build")
    ap.add_argument("--tree", type=Path, default=Path.cwd())
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--cuda-arch", default="90")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--shared-build", type=Path, default=None)
    ap.add_argument("--cmake-flag", action="append", default=[],
                    help="an extra -D flag, e.g. -DGGML_CUDA_FA=OFF (repeatable)")
    a = ap.parse_args(argv)
    tree = a.tree.resolve()
    try:
        for path in build(tree, tree / OUT_DIR, a.backend, a.cuda_arch, a.jobs, a.shared_build,
                          a.cmake_flag):
            print(f"artifact {path.relative_to(tree)}")
    except subprocess.CalledProcessError as exc:
        print(f"build step failed (exit {exc.returncode})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
