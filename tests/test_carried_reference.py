"""The GPU run's check of a carried reference build (scripts/gpu_stages.sh, stage_reference's
`carried_reference_runs`): a build made ahead on another machine is trusted only when its
artifacts match the manifest, every library it needs resolves, and it starts and sees a CUDA
device. The function runs as the script defines it, on real ELF binaries compiled here that
stand in for llama-bench and evalbot-topk (what each prints is what the real ones print)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalbot.engine.llamacpp.manifest import write_manifest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_stages.sh"
BENCH_C = r"""#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--list-devices") == 0) {
        printf("Available devices:\n%s\n", DEVICES);
        return 0;
    }
    return 1;
}
"""
TOPK_C = r"""#include <stdio.h>
int main(void) { fprintf(stderr, "usage: evalbot-topk score MODEL TOPK WINDOWS.txt\n"); return 64; }
"""

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("ldd") is None,
                                reason="needs gcc and ldd to make the stand-in binaries")


def compile_c(source: str, out: Path, *flags: str) -> None:
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["gcc", "-O0", "-o", str(out), str(src), *flags], check=True)
    src.unlink()


def reference(tmp: Path, devices: str = '"  CUDA0: NVIDIA H200 (143156 MiB, 142517 MiB free)"',
              *bench_flags: str) -> Path:
    ref = tmp / "models" / "llamacpp-reference" / "src-90e3f6adf8120749"
    ref.mkdir(parents=True)
    compile_c(BENCH_C, ref / "llama-bench", f"-DDEVICES={devices}", *bench_flags)
    compile_c(TOPK_C, ref / "evalbot-topk")
    write_manifest(ref, {"kind": "tarball", "sha256": "90e3f6ad"}, ["-DGGML_CUDA=ON"])
    return ref


def carried_runs(ref: Path, work: Path) -> tuple[bool, str]:
    """Run the function exactly as scripts/gpu_stages.sh defines it."""
    text = SCRIPT.read_text()
    match = re.search(r"^carried_reference_runs\(\) \{.*?^\}$", text, re.S | re.M)
    assert match, "scripts/gpu_stages.sh defines no carried_reference_runs"
    (work / "log").mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["bash", "-c", match.group(0) + '\ncarried_reference_runs "$1"', "check",
                           str(ref)], cwd=ROOT, env={"PATH": "/usr/bin:/bin", "W": str(work),
                                                     "PY": sys.executable, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    return proc.returncode == 0, (work / "log" / "reference-carried.txt").read_text()


def test_a_whole_build_that_sees_the_gpu_is_trusted(tmp_path: Path) -> None:
    ok, log = carried_runs(reference(tmp_path), tmp_path / "w")
    assert ok, log
    assert "CUDA0: NVIDIA H200" in log and "== ldd evalbot-topk" in log


def test_an_artifact_changed_after_the_manifest_is_refused(tmp_path: Path) -> None:
    ref = reference(tmp_path)
    with open(ref / "evalbot-topk", "ab") as f:  # still runs: only the manifest can tell
        f.write(b"\0")
    ok, log = carried_runs(ref, tmp_path / "w")
    assert not ok
    assert "evalbot-topk does not match its manifest" in log


def test_a_missing_artifact_is_refused(tmp_path: Path) -> None:
    ref = reference(tmp_path)
    (ref / "llama-bench").unlink()
    ok, _ = carried_runs(ref, tmp_path / "w")
    assert not ok


def test_a_library_the_machine_lacks_is_refused(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    compile_c("int evalbot_gone(void) { return 0; }", lib / "libevalbot-gone.so", "-shared",
              "-fPIC", "-Wl,-soname,libevalbot-gone.so.1")
    ref = reference(tmp_path, '"  CUDA0: NVIDIA H200"', f"-L{lib}", "-Wl,--no-as-needed",
                    "-levalbot-gone")
    ok, log = carried_runs(ref, tmp_path / "w")
    assert not ok
    assert "libevalbot-gone.so.1 => not found" in log


def test_a_build_that_sees_no_cuda_device_is_refused(tmp_path: Path) -> None:
    ok, log = carried_runs(reference(tmp_path, '"  (none)"'), tmp_path / "w")
    assert not ok
    assert "(none)" in log
