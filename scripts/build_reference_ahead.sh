#!/usr/bin/env bash
# Build the pinned llama.cpp reference's CUDA build ahead, on a CPU machine, for a GPU run to carry
# (docs/gpu-e2e.md, "The reference built ahead"): the same source, key and flags as
# stage_reference of scripts/gpu_stages.sh, compiled for sm_90 with CUDA 13.0 assembled from
# PyPI wheels, linked so that it runs on the GPU machine's image (another distribution).
#
#   bash scripts/build_reference_ahead.sh [SHARED_DIR]     (default: ./shared)
#
# Reads SHARED_DIR/llama.cpp-pruned.tar.gz, writes SHARED_DIR/llamacpp-reference.tar.xz
# (llamacpp-reference/<KEY>/{llama-bench,evalbot-topk,manifest.json}, what stage_refbuild
# unpacks into its models directory). Needs python3 with pip, gcc/g++ (8 to 14: what CUDA 13.0
# accepts), cmake >= 3.18, ninja, unzip, xz; downloads the wheels pinned below (about 520 MB).
# State: the wheels in $AHEAD_WHEELS, the toolkit in $AHEAD_CUDA, the build tree in $AHEAD_BUILD
# (a second run recompiles only what changed). $AHEAD_JOBS compile jobs (default 2), at nice 19.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=$(cd "${1:-$ROOT/shared}" && pwd)
CUDA=${AHEAD_CUDA:-/opt/cuda-13-pip}
WHEELS=${AHEAD_WHEELS:-/opt/cuda-13-pip-wheels}
BUILD=${AHEAD_BUILD:-/var/tmp/evalbot-reference-ahead}
JOBS=${AHEAD_JOBS:-2}
PY=${AHEAD_PYTHON:-python3}
# the pin and key of stage_reference (scripts/gpu_runner/chain.py: REF_SHA)
REF_SHA=90e3f6adf8120749245a83e9d2bc25eecb9bb58013397b247a263b8c4d279220
REF_KEY=src-${REF_SHA:0:16}
# CUDA 13.0. The runtime and cuBLAS as first released (13.0.0): linked against the oldest 13.0
# libraries, the build runs with whichever 13.0 update (or later 13.x) the GPU machine has. The
# compiler from 13.0 update 1 (13.0.48's nvcc wheel lacks bin/crt/link.stub, which every CUDA
# link step needs); its crt headers, libNVVM and CCCL go with it.
WHEEL_PINS="
nvidia-cuda-nvcc==13.0.88 --hash=sha256:56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03
nvidia-cuda-crt==13.0.88 --hash=sha256:2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4
nvidia-nvvm==13.0.88 --hash=sha256:c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0
nvidia-cuda-cccl==13.0.85 --hash=sha256:e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649
nvidia-cuda-runtime==13.0.48 --hash=sha256:5b54d12087a1abff81a4cbfa6556876e3afea1fc60da2e0816da374619810c89
nvidia-cuda-culibos==13.0.39 --hash=sha256:a43d9ce717b914edafe73837e138af8f327cc2c2333060155046378bb5bf3769
nvidia-cublas==13.0.0.19 --hash=sha256:f6723af2e8e2600a11dc384037d90d9bf93070e346c24ef2e8f9001658c99896
"
# Beyond stage_refbuild's flags, link-only flags (each one -D token: build.py takes no spaces):
# the GPU machine's CUDA 13 libraries by RUNPATH (the toolkit here is not there), $ORIGIN for
# anything beside the binaries, and the C++ runtime inside the binaries.
CMAKE_FLAGS=(
  "--cmake-flag=-DGGML_CUDA_FA=OFF"
  "--cmake-flag=-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON"
  "--cmake-flag=-DCMAKE_INSTALL_RPATH=\$ORIGIN;/usr/local/cuda/lib64;/usr/local/cuda/targets/x86_64-linux/lib"
  "--cmake-flag=-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++"
  "--cmake-flag=-DCMAKE_EXE_LINKER_FLAGS_RELEASE=-static-libgcc"
)
say() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
T0=$(date +%s)

fetch_wheels() {
  mkdir -p "$WHEELS"
  echo "$WHEEL_PINS" | grep . > "$WHEELS/requirements.txt"
  "$PY" -m pip download -q --no-deps --only-binary :all: --require-hashes \
    -r "$WHEELS/requirements.txt" -d "$WHEELS" 2> "$WHEELS/pip.log" ||
    { grep -v "is ignored" "$WHEELS/pip.log" >&2; exit 1; }
  [ "$(ls "$WHEELS"/*.whl | wc -l)" -ge 7 ] || { echo "wheels missing in $WHEELS" >&2; exit 1; }
}

assemble_toolkit() {  # the wheels' nvidia/cu13 trees merged into the layout CMake and nvcc expect
  local stamp; stamp=$(echo "$WHEEL_PINS" | sha256sum | cut -c1-16)
  [ "$(cat "$CUDA/.evalbot-pins" 2>/dev/null)" = "$stamp" ] && return 0
  rm -rf "$CUDA" "$CUDA.tmp" && mkdir -p "$CUDA.tmp"
  local pin w
  for pin in $(echo "$WHEEL_PINS" | awk 'NF {print $1}'); do
    w=$(ls "$WHEELS"/"$(echo "${pin%%==*}" | tr - _)"-"${pin##*==}"-*.whl)
    unzip -q -o "$w" 'nvidia/cu13/*' -d "$CUDA.tmp"
  done
  mv "$CUDA.tmp/nvidia/cu13" "$CUDA" && rm -rf "$CUDA.tmp"
  mkdir -p "$CUDA/nvvm/bin" "$CUDA/targets/x86_64-linux" "$CUDA/lib/stubs"
  [ -x "$CUDA/nvvm/bin/cicc" ] || { echo "no nvvm/bin/cicc (nvcc.profile's CICC_PATH)" >&2; exit 1; }
  ln -s lib "$CUDA/lib64"
  ln -s ../../include "$CUDA/targets/x86_64-linux/include"
  ln -s ../../lib "$CUDA/targets/x86_64-linux/lib"
  for lib in cudart cublas cublasLt nvvm; do
    ln -s "$(cd "$CUDA/lib" && ls lib$lib.so.* | head -1)" "$CUDA/lib/lib$lib.so"
  done
  # libcuda comes with the driver, not the toolkit: a stub with the driver API's names (each
  # returns CUDA_ERROR_NO_DEVICE) links the build here; the binaries load the real libcuda.so.1
  gcc -E -P -I"$CUDA/include" "$CUDA/include/cuda.h" |
    grep -oE '\bcu[A-Z][A-Za-z0-9_]*[[:space:]]*\(' | tr -d ' (' | sort -u |
    sed 's/.*/int &(void) { return 100; }/' > "$CUDA/lib/stubs/libcuda.c"
  gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$CUDA/lib/stubs/libcuda.so" "$CUDA/lib/stubs/libcuda.c"
  ln -s libcuda.so "$CUDA/lib/stubs/libcuda.so.1"
  "$CUDA/bin/nvcc" --version | tail -2
  echo "$stamp" > "$CUDA/.evalbot-pins"
}

build_reference() {  # reference_build itself, so the manifest is the one it writes
  local models=$BUILD/models
  rm -rf "$models" && mkdir -p "$models" "$BUILD/shared-build"
  # configure afresh each time, so the manifest's flags are the ones this build ran with;
  # ninja then recompiles only what those flags or the source changed
  rm -f "$BUILD/shared-build/build/CMakeCache.txt" "$BUILD/shared-build/build/build.ninja"
  (cd "$ROOT" && PATH="$CUDA/bin:$PATH" CUDACXX="$CUDA/bin/nvcc" CUDAToolkit_ROOT="$CUDA" \
    nice -n 19 "$PY" -m engine.llamacpp.reference_build --models-dir "$models" --key "$REF_KEY" \
      --tarball "$SHARED/llama.cpp-pruned.tar.gz" --sha256 "$REF_SHA" --backend cuda \
      --cuda-arch 90 --jobs "$JOBS" --shared-build "$BUILD/shared-build" "${CMAKE_FLAGS[@]}")
}

check_portable() {  # what the binaries need from the machine that runs them
  local dir=$BUILD/models/llamacpp-reference/$REF_KEY bin
  for bin in "$dir/llama-bench" "$dir/evalbot-topk"; do
    echo "$(basename "$bin"): $(readelf -d "$bin" | grep -oE '(RUNPATH|RPATH).*')"
    readelf -d "$bin" | grep -oE 'Shared library: \[[^]]*\]' | sed 's/^/  /'
    objdump -T "$bin" | grep -oE '\b(GLIBC|GLIBCXX|CXXABI|GCC|GOMP|OMP)_[0-9.]+' | sort -uV |
      awk -F_ '{v[$1]=$0} END {for (k in v) printf "  highest %s\n", v[k]}'
    [[ $(readelf -d "$bin") != *libstdc++* ]] || { echo "libstdc++ is linked dynamically" >&2; exit 1; }
  done
  # the binaries start here with the wheels' libraries and the stub driver (no GPU: no device);
  # LD_BIND_NOW: every symbol they use must resolve in the 13.0.0 runtime and cuBLAS
  local out rc=0
  out=$(LD_BIND_NOW=1 LD_LIBRARY_PATH="$CUDA/lib:$CUDA/lib/stubs" "$dir/evalbot-topk" 2>&1) || rc=$?
  [ "$rc" = 64 ] && [[ $out == usage:* ]] || { echo "evalbot-topk does not start: $out" >&2; exit 1; }
  LD_BIND_NOW=1 LD_LIBRARY_PATH="$CUDA/lib:$CUDA/lib/stubs" "$dir/llama-bench" --list-devices 2>&1 |
    sed 's/^/  llama-bench here: /' || true
}

say "wheels"; fetch_wheels
say "toolkit at $CUDA"; assemble_toolkit
say "build ($JOBS jobs)"; build_reference
say "check"; check_portable
# xz in one thread with its 64 MiB window: the two binaries share their CUDA code (22 MB of
# fatbin each), which gzip's 32 KiB window cannot see (gzip: 58 MB, this: 29 MB)
say "pack"
OUT=$SHARED/llamacpp-reference.tar.xz
tar cf - --sort=name --owner=0 --group=0 --numeric-owner -C "$BUILD/models" llamacpp-reference |
  nice -n 19 xz -9 -T1 > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
say "$OUT: $(stat -c %s "$OUT") bytes, sha256 $(sha256sum "$OUT" | cut -c1-64)"
