"""The sparkinfer profile's build: the engine's own build command, then evalbot's witness tool.

    python build_witness.py --tree DIR [--build-dir build] -- ENGINE_BUILD_ARGV...

Runs ENGINE_BUILD_ARGV (the profile's cmake command, unchanged) in the tree; its failure is the
side's build failure, as it was. Then compiles `witness.cpp` beside this file (the harness's
source, never the tree's) against the tree's own headers (runtime/include, moe/include,
runtime/examples/qwen3_gguf_config.h) and the libraries its build just made
(build/runtime/libsparkinfer_runtime.so, build/moe/libsparkinfer_moe.so), with the compiler and
CUDA runtime that build used (read from its CMakeCache.txt), into
`{tree}/evalbot-out/evalbot-sparkinfer-witness`. The profile lists that file among its artifacts,
so it is copied out, hashed and re-verified before every process like the engine's own tools;
its run path finds the two libraries beside it in the copied artifacts ($ORIGIN).

A tree whose headers no longer compile the tool (a head that changed the API) does not fail the
side's build: the artifact is then a placeholder script that prints `[FAIL] ...` and exits 1.
Every witness process of that side fails, so the cells its witnesses cover are `unconfirmed`,
never an infrastructure error: no tier, no REJECT. The compiler's error is in the build log.
The process this tool becomes runs the side's library, which can do anything in it; nothing here
is trusted beyond what the witness protocol checks (docs/trust.md).

Standard library only: the harness starts it with an isolated Python (-I) in the tree.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "witness.cpp"
OUT_DIR = "evalbot-out"
TOOL = "evalbot-sparkinfer-witness"
ARTIFACT = f"{OUT_DIR}/{TOOL}"
LIBS = (("build/runtime", "sparkinfer_runtime"), ("build/moe", "sparkinfer_moe"))
COMPILE_TIMEOUT_S = 600
NOT_BUILT = "[FAIL] evalbot-sparkinfer-witness was not built for this tree"


class NotBuilt(Exception):
    """The tool cannot be built for this tree: the reason, for the build log and the placeholder."""


def read_cache(path: Path) -> dict[str, str]:
    """NAME -> value of a CMakeCache.txt (`NAME:TYPE=VALUE` lines); {} when there is none."""
    out: dict[str, str] = {}
    if not path.is_file():
        return out
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(("#", "//")) or "=" not in line or ":" not in line.split("=", 1)[0]:
            continue
        key, value = line.split("=", 1)
        out[key.split(":", 1)[0]] = value
    return out


def toolchain(cache: dict[str, str]) -> tuple[str, Path, Path]:
    """(C++ compiler, libcudart to link, the CUDA include directory) of the engine's own build."""
    cxx = cache.get("CMAKE_CXX_COMPILER") or shutil.which("c++") or shutil.which("g++") or ""
    if not cxx or not Path(cxx).is_file():
        raise NotBuilt(f"no C++ compiler (CMAKE_CXX_COMPILER {cxx!r})")
    cudart = cache.get("CUDA_CUDART") or cache.get("CUDA_cudart_LIBRARY") or ""
    nvcc = cache.get("CUDAToolkit_NVCC_EXECUTABLE") or shutil.which("nvcc") or ""
    bins = [cache.get("CUDAToolkit_BIN_DIR", ""), str(Path(nvcc).resolve().parent) if nvcc else ""]
    if not cudart or not Path(cudart).is_file():
        found = [Path(b) / ".." / lib / "libcudart.so" for b in bins if b for lib in ("lib64", "lib")]
        cudart = next((str(p.resolve()) for p in found if p.is_file()), "")
    if not cudart:
        raise NotBuilt("no libcudart.so (CUDA_CUDART in the build's CMakeCache.txt, or nvcc's toolkit)")
    lib_dir = Path(cudart).parent
    roots = [lib_dir / "..", lib_dir / ".." / "..", *[Path(b) / ".." for b in bins if b]]
    incs = [r / "include" for r in roots] + [t / "include" for r in roots
                                             for t in sorted((r / "targets").glob("*"))]
    inc = next((p.resolve() for p in incs if (p / "cuda_runtime.h").is_file()), None)
    if inc is None:
        raise NotBuilt(f"no cuda_runtime.h beside {cudart}")
    return cxx, Path(cudart), inc


def compile_argv(tree: Path, out: Path, cxx: str, cudart: Path, cuda_inc: Path) -> list[str]:
    """The compiler's argv: the side's headers, its two libraries, CUDA's runtime; run paths to
    the libraries as the artifacts lay them out beside the tool, and to CUDA's runtime."""
    incs = [tree / "runtime" / "include", tree / "moe" / "include", tree / "kernels" / "include",
            tree / "runtime" / "examples", cuda_inc]
    argv = [cxx, "-std=c++17", "-O2", "-o", str(out), str(SOURCE)]
    argv += [f"-I{p}" for p in incs if p.is_dir()]
    for rel, name in LIBS:
        argv += [f"-L{tree / rel}", f"-l{name}"]
    rpath = ":".join([f"$ORIGIN/../{rel}" for rel, _ in LIBS] + [str(cudart.parent)])
    return [*argv, f"-L{cudart.parent}", "-lcudart", f"-Wl,-rpath,{rpath}", "-lpthread"]


def build_tool(tree: Path, build_dir: str) -> Path:
    """Compile the tool into tree/evalbot-out; raises NotBuilt with the reason."""
    for rel, name in LIBS:
        if not (tree / rel / f"lib{name}.so").is_file():
            raise NotBuilt(f"the engine's build made no {rel}/lib{name}.so")
    cxx, cudart, cuda_inc = toolchain(read_cache(tree / build_dir / "CMakeCache.txt"))
    out = fresh_out(tree)
    tmp = out.with_name(TOOL + ".tmp")
    argv = compile_argv(tree, tmp, cxx, cudart, cuda_inc)
    print("+", shlex.join(argv), flush=True)
    try:
        done = subprocess.run(argv, cwd=tree, capture_output=True, text=True,
                              timeout=COMPILE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NotBuilt(f"the compiler did not run: {exc}") from exc
    sys.stdout.write(done.stdout + done.stderr)
    if done.returncode != 0 or not tmp.is_file():
        raise NotBuilt(first_error(done.stderr) or f"the compiler exited {done.returncode}")
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)
    return out


def fresh_out(tree: Path) -> Path:
    """tree/evalbot-out/ as a plain directory of this run's (whatever the tree planted there)."""
    folder = tree / OUT_DIR
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        folder.unlink()
    folder.mkdir(exist_ok=True)
    for name in (TOOL, TOOL + ".tmp"):
        path = folder / name
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)
    return folder / TOOL


def first_error(stderr: str) -> str:
    lines = stderr.splitlines()
    return next((ln.strip() for ln in lines if " error: " in ln or ln.startswith("error")), "")


def placeholder(tree: Path, reason: str) -> Path:
    """The artifact of a tree the tool does not build for: a script whose every run fails,
    saying why (the harness's witness then fails: `unconfirmed`, not an infrastructure error)."""
    out = fresh_out(tree)
    message = (f"{NOT_BUILT}: {clean(reason)} (engine/sparkinfer/build_witness.py; the "
               "compiler's output is in the build log)")
    out.write_text("#!/bin/sh\n# evalbot-sparkinfer-witness: a placeholder, not the tool "
                   f"(engine/sparkinfer/build_witness.py)\nprintf '%s\\n' {shlex.quote(message)} >&2\n"
                   "exit 1\n")
    os.chmod(out, 0o755)
    return out


def clean(text: str, limit: int = 300) -> str:
    """One printable line (the tree's file names and messages reach it)."""
    return "".join(c if c.isprintable() else "?" for c in " ".join(text.split()))[:limit]


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" not in argv:
        raise SystemExit("usage: build_witness.py --tree DIR [--build-dir build] -- ENGINE_BUILD_ARGV...")
    at = argv.index("--")
    return argv[:at], argv[at + 1:]


def main(argv: list[str] | None = None) -> int:
    import argparse

    ours, engine = split_argv(list(sys.argv[1:] if argv is None else argv))
    ap = argparse.ArgumentParser(prog="build_witness.py")
    ap.add_argument("--tree", type=Path, default=Path.cwd())
    ap.add_argument("--build-dir", default="build", help="the engine build's CMake binary dir")
    a = ap.parse_args(ours)
    tree = a.tree.resolve()
    if not engine:
        raise SystemExit("build_witness.py: no engine build command after --")
    print("+", shlex.join(engine), flush=True)
    try:
        rc = subprocess.run(engine, cwd=tree).returncode
    except OSError as exc:
        print(f"engine build could not start: {exc}", file=sys.stderr)
        return 1
    if rc != 0:
        print(f"engine build failed (exit {rc})", file=sys.stderr)
        return rc if rc > 0 else 1
    try:
        out = build_tool(tree, a.build_dir)
        print(f"witness tool: built {out.relative_to(tree)}", flush=True)
    except NotBuilt as exc:
        out = placeholder(tree, str(exc))
        print(f"witness tool: NOT built ({clean(str(exc))}); {out.relative_to(tree)} is a "
              "placeholder that fails every witness run: the cells it covers get no tier",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
