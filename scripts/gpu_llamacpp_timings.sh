#!/usr/bin/env bash
# Raw timings of the llamacpp profile's processes on the GPU box, for sizing its floors and its
# witness (docs/gpu-e2e.md, "llamacpp timings"): the pinned reference's llama-bench with the
# profile's exact argv, and its `evalbot-topk decode` witness with fresh random prompts, each
# timed from outside (process start to exit), alternating, plus one deep-window score.
#
#   TIMING_BUDGET_S=380 bash scripts/gpu_llamacpp_timings.sh
#
# Results go to $OUT as they appear: bench-N.json (llama-bench -o json), timings.tsv (kind, i,
# wall seconds), score-long.txt.
set -uo pipefail
ROOT=$(pwd)
W=${TIMING_WORK:-/tmp/gpu-timings}
OUT=${OUT:-$W/out}
BUDGET=${TIMING_BUDGET_S:-380}
START=$(date +%s)
KEY=src-90e3f6adf8120749
SHA=90e3f6adf8120749245a83e9d2bc25eecb9bb58013397b247a263b8c4d279220
mkdir -p "$W/models" "$OUT"
export PATH="$PATH:/usr/local/cuda/bin" PYTHONPATH=/tmp/site:$ROOT
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
log() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/timeline.txt"; }

python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site shared/wheels/*.whl
log "reference build and model"
python3 -m engine.llamacpp.reference_build --models-dir "$W/models" --key $KEY \
  --tarball shared/llama.cpp-pruned.tar.gz --sha256 $SHA --backend cuda --cuda-arch 90 \
  --jobs "$(nproc)" --cmake-flag=-DGGML_CUDA_FA=OFF > "$OUT/reference-build.txt" 2>&1 &
ref=$!
python3 shared/synth_gguf.py shared/ggml-vocab-qwen2.gguf "$W/models/m.gguf" \
  --layers 28 --embd 1024 --ff 3072 --heads 16 --kv 8 --hd 128 > "$OUT/model.txt" 2>&1
wait $ref || { log "reference build failed"; tail -5 "$OUT/reference-build.txt"; exit 1; }
R=$W/models/llamacpp-reference/$KEY
BENCH=$(find "$R" -name llama-bench -type f | head -1)
TOPK=$(find "$R" -name evalbot-topk -type f | head -1)
log "built: $BENCH $TOPK"
printf 'kind\ti\twall_s\trc\n' > "$OUT/timings.tsv"
timed() {  # kind i argv... -> wall seconds into timings.tsv, stdout to $OUT/kind-i.out
  local kind=$1 i=$2; shift 2
  local t0=$EPOCHREALTIME
  "$@" > "$OUT/$kind-$i.out" 2> "$OUT/$kind-$i.err"
  local rc=$? t1=$EPOCHREALTIME
  printf '%s\t%s\t%s\t%s\n' "$kind" "$i" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')" "$rc" >> "$OUT/timings.tsv"
}
for i in $(seq 1 40); do
  [ "$(left)" -lt 40 ] && break
  python3 -c "import random,sys; r=random.Random($i); print(' '.join(str(r.randrange(1000, 150000)) for _ in range(4608)))" > "$W/prompt.txt"
  timed witness "$i" "$TOPK" decode "$W/models/m.gguf" 4096 "$W/prompt.txt"
  timed bench "$i" "$BENCH" -m "$W/models/m.gguf" -p 4096 -n 256 -d 0,0,4096 -r 3 -fa 0 -ngl 99 -o json
  [ $((i % 4)) = 0 ] && log "round $i"
done
if [ "$(left)" -gt 30 ]; then
  python3 -c "import random; r=random.Random(7); print('@32768 ' + ' '.join(str(r.randrange(1000, 150000)) for _ in range(33024)))" > "$W/long.txt"
  timed score-long 1 "$TOPK" score "$W/models/m.gguf" 16 "$W/long.txt"
  head -c 300 "$OUT/score-long-1.out" > "$OUT/score-long-head.txt"; rm -f "$OUT/score-long-1.out"
fi
log "end"
cat "$OUT/timings.tsv"
