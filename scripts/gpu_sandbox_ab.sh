#!/usr/bin/env bash
# Issue 31 on the GPU box: the bubblewrap sandbox against the hand-written one it replaced, on
# one box (scripts/sandbox_ab.py): main's qwen3_gguf_bench sweep of the shipped sparkinfer
# profile's Qwythos run (contexts 128, 4096, 32768 and 65536, int8 KV, the profile's env),
# started through each launcher in alternating pairs, on the synthetic Qwythos-9B.
#
#   bash scripts/gpu_sandbox_ab.sh [PAIRS]   # default 6: 12 sweeps of ~25 s after ~3 min of set-up
#
# Needs shared/ as scripts/gpu_sparkinfer.sh's setup, box and model stages do (wheels, debs,
# sparkinfer-ba8add3.tar.gz, the vocabulary, synth_qwen35.py), and shared/old_sandbox_exec.py:
# `git show 67a49bc^:engine/sandbox/sandbox_exec.py`, the launcher before bubblewrap. Writes
# $OUT/ab.json after every pair and $OUT/ab.txt, the table, at the end.
set -uo pipefail
PAIRS=${1:-6}
W=${SPK_WORK:-/tmp/gpu-sandbox-ab}
OUT=${OUT:-$W/out}
PY=${SPK_PYTHON:-$(command -v python3)}
mkdir -p "$OUT"
[ -e shared/old_sandbox_exec.py ] || { echo "shared/old_sandbox_exec.py is missing" >&2; exit 1; }
SPK_WORK=$W SPK_BUDGET_S=100000 OUT=$OUT bash scripts/gpu_sparkinfer.sh setup box model || exit 1
for st in setup box model; do
  [ -e "$W/done/$st" ] || { echo "stage $st failed ($W/log/stage-$st.txt)" >&2; exit 1; }
done
B=$W/ab-build
if [ ! -x "$B/build/runtime/qwen3_gguf_bench" ]; then
  rm -rf "$B" && mkdir -p "$B" && tar xzf shared/sparkinfer-ba8add3.tar.gz -C "$B"
  (cd "$B" && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
     -DBUILD_TESTS=OFF -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON &&
   cmake --build build -j 16 --target qwen3_gguf_bench) > "$OUT/build.txt" 2>&1 ||
    { tail -30 "$OUT/build.txt" >&2; exit 1; }
fi
chmod -R a+rX "$B" "$W/models"
cp shared/old_sandbox_exec.py "$W/old_sandbox_exec.py"
extra=$(sed -n 's/^\([A-Z_]*\)=\(.*\)$/,"\1":"\2"/p' "$W/sandbox-env.txt" 2>/dev/null | tr -d '\n')
spec="{\"user\":\"evalbot-sandbox\",\"cwd\":\"$B\",\"ro\":[\"$B\",\"$W/models\"],
\"limits\":{\"nproc\":1024,\"nofile\":4096,\"fsize_mb\":1024},
\"env\":{\"PATH\":\"$PATH\",\"LC_ALL\":\"C\",\"HOME\":\"/tmp\",\"CUDA_VISIBLE_DEVICES\":\"0\",
\"SPARKINFER_KV_INT8\":\"1\"$extra}}"
"$PY" scripts/sandbox_ab.py --old "$W/old_sandbox_exec.py" --new engine/sandbox/sandbox_exec.py \
  --spec "$spec" --pairs "$PAIRS" --out "$OUT/ab.json" -- /usr/bin/env \
  SPARKINFER_BENCH_SWEEP_CTXS=128,4096,32768,65536 "$B/build/runtime/qwen3_gguf_bench" \
  "$W/models/qwythos-synth.gguf" 128 sweep | tee "$OUT/ab.txt"
