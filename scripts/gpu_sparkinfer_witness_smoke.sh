#!/usr/bin/env bash
# Smoke of evalbot-sparkinfer-witness on the H200 (issue 30, part 1; docs/gpu-e2e.md): real
# sparkinfer ba8add3 built by the proposed profile build (engine/sparkinfer/build_witness.py
# around the engine's cmake command), the synthetic Qwythos-9B (and the 4-layer qwen35moe file),
# then the tool through the harness's handoff clock (scripts/gpu_sparkinfer_witness.py):
#   (a) agreement with the engine's own tools for the same ids: prefill_check's batched seed
#       and the score tool's token-path argmaxes, for the prefill and the decode modes;
#   (b) the prompt's and the steps' time (the tool's `witness-timing:` line) beside the bench;
#   (c) repetitions on fresh ids: the handoff clock's sd.
# One call with its own budget (SMOKE_BUDGET_S, default 540 s); results in $OUT after each step.
#
#   bash scripts/gpu_sparkinfer_witness_smoke.sh        # run(timeout_s=600)
#   SMOKE_STAGES=aa bash scripts/gpu_sparkinfer_witness_smoke.sh   # only (d), below
#   (d) the same ids twice (is the tool's output one build's A/A identical?) and with the int8
#       prefill projections off (SPARKINFER_PREFILL_I8=0: the numerics of the slow-prefill
#       head at 4096): how many STEP ids an honest numerics change flips on this model.
#
# Needs (carried in shared/, ignored by git): wheels/gguf-*.whl, sparkinfer-ba8add3.tar.gz,
# ggml-vocab-qwen35.gguf, synth_qwen35.py.
set -uo pipefail
ROOT=$(pwd)
W=${SMOKE_WORK:-/tmp/spk-witness}
OUT=${OUT:-$W/out}
BUDGET=${SMOKE_BUDGET_S:-540}
START=$(date +%s)
PY=$(command -v python3)
CTXS=128,4096,32768,65536
STAGES=${SMOKE_STAGES:-main}
DRIVER="$PY $ROOT/scripts/gpu_sparkinfer_witness.py"
export PATH="$PATH:/usr/local/cuda/bin" PYTHONUNBUFFERED=1
mkdir -p "$W/models" "$W/raw" "$OUT"
log() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$W/raw/timeline.txt"; }
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
pack() {
  cp "$W/raw/timeline.txt" "$OUT/" 2>/dev/null
  cat "$W"/raw/*.jsonl > "$OUT/reps.jsonl" 2>/dev/null
  tar czf "$OUT/all.tgz" -C "$W/raw" . 2>/dev/null
}
die() { log "FAILED: $*"; pack; exit 1; }
timed() {  # name, command...: raw/NAME.txt holds the output, raw/NAME.wall its wall seconds
  local name=$1; shift
  local t0; t0=$(date +%s%N)
  "$@" > "$W/raw/$name.txt" 2>&1; local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%d.%03d rc=%d\n' $((ms / 1000)) $((ms % 1000)) $rc > "$W/raw/$name.wall"
  log "$name: $(cat "$W/raw/$name.wall")"
  pack
  return $rc
}
want() { [ "$(left)" -gt "$1" ] || { log "skipped $2: $(left)s left, needs ~$1s"; return 1; }; }

log "start: budget ${BUDGET}s, $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv,noheader >> "$W/raw/timeline.txt" 2>&1
"$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site shared/wheels/gguf-*.whl \
  || die "pip install gguf"
export PYTHONPATH=/tmp/site

# The proposed profile build: the harness's wrapper around the shipped cmake command (the
# prefill_check target added for this smoke only).
T=$W/tree
rm -rf "$T" && mkdir -p "$T" && tar xzf shared/sparkinfer-ba8add3.tar.gz -C "$T" || die "untar"
ENGINE_BUILD="cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
-DBUILD_TESTS=OFF -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON && cmake --build build -j 16 --target \
qwen3_gguf_bench qwen3_gguf_score qwen3_gguf_generate qwen3_gguf_prefill_check"
( cd "$T" && timed build "$PY" -I "$ROOT/engine/sparkinfer/build_witness.py" --tree "$T" -- \
    /bin/sh -c "$ENGINE_BUILD" ) & pb=$!
timed synth-qwythos "$PY" shared/synth_qwen35.py shared/ggml-vocab-qwen35.gguf \
  "$W/models/qwythos.gguf" --outtype q4_k_m || die "synth qwythos"
[ "$STAGES" = main ] && { timed synth-moe4 "$PY" scripts/gpu_synth_qwen35.py \
  shared/ggml-vocab-qwen35.gguf "$W/models/moe4.gguf" --outtype q4_k_m --qwen36 --layers 4 \
  || log "synth moe4 failed"; }
wait $pb || die "build (raw/build.txt)"
grep -E '^witness tool:' "$W/raw/build.txt" | tee -a "$W/raw/timeline.txt"
TOOL=$T/evalbot-out/evalbot-sparkinfer-witness
R=$T/build/runtime
M=$W/models/qwythos.gguf
[ -x "$TOOL" ] || die "no tool"
readelf -d "$TOOL" | grep -E 'NEEDED|RUNPATH' >> "$W/raw/timeline.txt"
export SPARKINFER_KV_INT8=1   # the profile's env

if [ "$STAGES" = aa ]; then  # (d)
  "$PY" -c "
import secrets
print(' '.join(str(secrets.randbelow(1000)) for _ in range(4096)))
for _ in range(64): print(secrets.randbelow(1000))" > "$W/raw/aa-ids.txt"
  for k in 1 2; do
    timed aa-prefill-$k $DRIVER fixed "$TOOL" "$M" prefill 4096 64 --ids "$W/raw/aa-ids.txt" \
      --out "$W/raw/aa-prefill-$k.steps" --ctxs $CTXS
  done
  timed aa-prefill-i8off $DRIVER fixed "$TOOL" "$M" prefill 4096 64 --ids "$W/raw/aa-ids.txt" \
    --out "$W/raw/aa-prefill-i8off.steps" --ctxs $CTXS --env SPARKINFER_PREFILL_I8=0
  timed same-aa-prefill $DRIVER same "$W/raw/aa-prefill-1.steps" "$W/raw/aa-prefill-2.steps"
  timed same-i8off $DRIVER same "$W/raw/aa-prefill-1.steps" "$W/raw/aa-prefill-i8off.steps"
  "$PY" "$ROOT/scripts/gpu_sparkinfer_witness.py" fill-ids 4096 257 > "$W/raw/aa-dec-all.txt"
  "$PY" -c "print('\n'.join(open('$W/raw/aa-dec-all.txt').read().split()[4104:]))" > "$W/raw/aa-dec-ids.txt"
  for k in 1 2; do
    timed aa-decode-$k $DRIVER fixed "$TOOL" "$M" decode 4096 256 --ids "$W/raw/aa-dec-ids.txt" \
      --out "$W/raw/aa-decode-$k.steps" --ctxs $CTXS
  done
  timed same-aa-decode $DRIVER same "$W/raw/aa-decode-1.steps" "$W/raw/aa-decode-2.steps"
  log "done"; pack; exit 0
fi

# -- the bench itself, for the rates the witness is set beside -------------------------------
want 60 sweep && timed sweep env SPARKINFER_BENCH_SWEEP_CTXS=$CTXS "$R/qwen3_gguf_bench" "$M" 128 sweep

# -- (a) prefill: prefill_check's prompt and continuation; its seed; the score's token path --
"$PY" -c "
P, C = 4096, 16
print(' '.join(str(100 + (i % 20000)) for i in range(P)))
for j in range(C): print(100 + ((P + j) % 20000))" > "$W/raw/pc-ids.txt"
want 40 prefill-check && timed prefill-check "$R/qwen3_gguf_prefill_check" "$M" 4096 16
timed tool-pc $DRIVER fixed "$TOOL" "$M" prefill 4096 16 --ids "$W/raw/pc-ids.txt" \
  --out "$W/raw/tool-pc.steps" --ctxs $CTXS
want 40 score-pc && timed score-pc env SPARKINFER_SCORE_MAX_SEQ=8192 "$R/qwen3_gguf_score" "$M" 1 \
  $(tr '\n' ' ' < "$W/raw/pc-ids.txt") && \
  timed compare-pc $DRIVER compare "$W/raw/tool-pc.steps" "$W/raw/score-pc.txt" 4095

# -- (b), (c): repetitions on fresh ids through the harness's handoff clock ------------------
want 45 reps-prefill-4096 && timed reps-prefill-4096 $DRIVER reps "$TOOL" "$M" prefill 4096 32 \
  --reps 6 --ctxs $CTXS --out "$W/raw/prefill-4096.jsonl"
want 50 reps-decode-4096 && timed reps-decode-4096 $DRIVER reps "$TOOL" "$M" decode 4096 855 \
  --reps 6 --ctxs $CTXS --out "$W/raw/decode-4096.jsonl"
want 30 reps-decode-128 && timed reps-decode-128 $DRIVER reps "$TOOL" "$M" decode 128 375 \
  --reps 4 --ctxs $CTXS --out "$W/raw/decode-128.jsonl"

# -- (a) decode: the tool's fill + fresh ids, against the score's token path ------------------
"$PY" "$ROOT/scripts/gpu_sparkinfer_witness.py" fill-ids 128 33 > "$W/raw/dec-all.txt"
"$PY" -c "
ids = open('$W/raw/dec-all.txt').read().split()
print('\n'.join(ids[136:]))" > "$W/raw/dec-ids.txt"
want 20 tool-dec && timed tool-dec $DRIVER fixed "$TOOL" "$M" decode 128 32 --ids "$W/raw/dec-ids.txt" \
  --out "$W/raw/tool-dec.steps" --ctxs $CTXS && \
  timed score-dec env SPARKINFER_SCORE_MAX_SEQ=4096 "$R/qwen3_gguf_score" "$M" 1 $(cat "$W/raw/dec-all.txt") && \
  timed compare-dec $DRIVER compare "$W/raw/tool-dec.steps" "$W/raw/score-dec.txt" 136

# -- the deep decode cells ------------------------------------------------------------------
want 50 reps-decode-32768 && timed reps-decode-32768 $DRIVER reps "$TOOL" "$M" decode 32768 1024 \
  --reps 3 --ctxs $CTXS --out "$W/raw/decode-32768.jsonl"

# -- qwen35moe (4 layers): prefill_batched returns -1, the token fill ------------------------
if [ -f "$W/models/moe4.gguf" ] && want 30 moe; then
  M6=$W/models/moe4.gguf
  "$PY" -c "
import secrets
print(' '.join(str(secrets.randbelow(1000)) for _ in range(512)))
for _ in range(16): print(secrets.randbelow(1000))" > "$W/raw/moe-ids.txt"
  timed tool-moe $DRIVER fixed "$TOOL" "$M6" prefill 512 16 --ids "$W/raw/moe-ids.txt" \
    --out "$W/raw/tool-moe.steps" --ctxs 128,512,4096 && \
  timed score-moe env SPARKINFER_SCORE_MAX_SEQ=4096 "$R/qwen3_gguf_score" "$M6" 1 \
    $(tr '\n' ' ' < "$W/raw/moe-ids.txt") && \
  timed compare-moe $DRIVER compare "$W/raw/tool-moe.steps" "$W/raw/score-moe.txt" 511
  timed reps-moe-prefill-4096 $DRIVER reps "$TOOL" "$M6" prefill 4096 512 --reps 3 \
    --ctxs 128,512,4096,16384,32768 --out "$W/raw/moe-prefill-4096.jsonl"
fi

want 45 reps-decode-65536 && timed reps-decode-65536 $DRIVER reps "$TOOL" "$M" decode 65536 1024 \
  --reps 2 --ctxs $CTXS --out "$W/raw/decode-65536.jsonl"
while want 25 more-prefill-reps; do
  timed more-prefill-4096 $DRIVER reps "$TOOL" "$M" prefill 4096 32 --reps 4 --ctxs $CTXS \
    --out "$W/raw/prefill-4096-more.jsonl"
done
log "done"
pack
