#!/usr/bin/env bash
# Phase 1 of the sparkinfer GPU work (docs/gpu-e2e.md, "sparkinfer"): the raw measurements the
# sparkinfer profile is set from, on the H200, without evalbot. One call, its own time budget
# (MEASURE_BUDGET_S, default 380 s), results packed into $OUT/all.tgz after every step.
#
#   bash scripts/gpu_sparkinfer_measure.sh
#
# Needs (carried in shared/, ignored by git): wheels/ (gguf), sparkinfer-ba8add3.tar.gz,
# ggml-vocab-qwen35.gguf. Steps: two builds A and B of the same commit (8 cores each, in
# parallel with writing the synthetic models), fixtures of generate/score on a short seeded
# prompt, alternating sweeps A,B,B,A,... of the profile's qwythos contexts, 131072 alone with
# SPARKINFER_PREFILL_BATCHED_MAXCTX=131072, decode-witness timings, a 4-layer qwen35moe load
# check, the slow and broken heads' effect, then more sweep rounds while the budget lasts.
set -uo pipefail
ROOT=$(pwd)
W=${MEASURE_WORK:-/tmp/spk-measure}
OUT=${OUT:-$W/out}
BUDGET=${MEASURE_BUDGET_S:-380}
START=$(date +%s)
PY=$(command -v python3)
CTXS=128,4096,32768,65536
export PATH="$PATH:/usr/local/cuda/bin"
mkdir -p "$W/models" "$W/raw" "$OUT"
log() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$W/raw/timeline.txt"; }
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
pack() { cp "$W/raw/timeline.txt" "$OUT/" 2>/dev/null; tar czf "$OUT/all.tgz" -C "$W/raw" .; }
die() { log "FAILED: $*"; pack; exit 1; }
timed() {  # name, command...: raw/NAME.txt holds the output, raw/NAME.wall its wall seconds
  local name=$1; shift
  local t0; t0=$(date +%s%N)
  "$@" > "$W/raw/$name.txt" 2>&1; local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%d.%03d rc=%d\n' $((ms / 1000)) $((ms % 1000)) $rc > "$W/raw/$name.wall"
  log "$name: $(cat "$W/raw/$name.wall")"
  return $rc
}

log "start: budget ${BUDGET}s, $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv,noheader >> "$W/raw/timeline.txt" 2>&1
"$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site shared/wheels/gguf-*.whl \
  || die "pip install gguf"
export PYTHONPATH=/tmp/site

build() {  # tree dir: configure + the three tools, 8 cores
  mkdir -p "$1" && tar xzf shared/sparkinfer-ba8add3.tar.gz -C "$1" || return 1
  cmake -S "$1" -B "$1/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DBUILD_TESTS=OFF > "$1.configure.log" 2>&1 &&
  cmake --build "$1/build" -j 8 --target qwen3_gguf_bench qwen3_gguf_score qwen3_gguf_generate \
    > "$1.build.log" 2>&1
}
t0=$(date +%s)
build "$W/a" & pa=$!
build "$W/b" & pb=$!
timed synth-qwythos "$PY" shared/synth_qwen35.py shared/ggml-vocab-qwen35.gguf \
  "$W/models/qwythos.gguf" --outtype q4_k_m || die "synth qwythos"
timed synth-moe4 "$PY" scripts/gpu_synth_qwen35.py shared/ggml-vocab-qwen35.gguf \
  "$W/models/moe4.gguf" --outtype q4_k_m --qwen36 --layers 4 || log "synth moe4 failed"
wait $pa || { tail -30 "$W/a.build.log" "$W/a.configure.log" > "$W/raw/build-a-fail.txt"; die "build a"; }
wait $pb || { tail -30 "$W/b.build.log" > "$W/raw/build-b-fail.txt"; die "build b"; }
log "builds a+b: $(( $(date +%s) - t0 ))s (parallel, 8 cores each, with the model writes)"
ls -la "$W/models" >> "$W/raw/timeline.txt"
A=$W/a/build/runtime; B=$W/b/build/runtime; M=$W/models/qwythos.gguf
pack

# -- fixtures: generate and score on a short seeded prompt (64 ids of the real vocabulary) --------
PROMPT=$("$PY" -c "import random; r=random.Random(20); print(' '.join(str(r.randrange(1000, 150000)) for _ in range(64)))")
echo "$PROMPT" > "$W/raw/prompt-ids.txt"
timed generate-a "$A/qwen3_gguf_generate" "$M" 32 $PROMPT
GEN=$(sed -n 's/^OUTPUT_IDS://p' "$W/raw/generate-a.txt")
timed score-a "$A/qwen3_gguf_score" "$M" 8 $PROMPT $GEN
timed score-b "$B/qwen3_gguf_score" "$M" 8 $PROMPT $GEN
timed score-a-requant0 env SPARKINFER_DOWN_REQUANT_Q4K=0 "$A/qwen3_gguf_score" "$M" 8 $PROMPT $GEN
timed score-a-kvint8 env SPARKINFER_KV_INT8=1 "$A/qwen3_gguf_score" "$M" 8 $PROMPT $GEN
pack

sweep() {  # name, build dir, ctxs, extra env...
  local name=$1 dir=$2 ctxs=$3; shift 3
  timed "$name" env SPARKINFER_BENCH_SWEEP_CTXS="$ctxs" "$@" "$dir/qwen3_gguf_bench" "$M" 128 sweep
  grep '^SWEEP_JSON' "$W/raw/$name.txt" | sed "s/^SWEEP_JSON /{\"name\":\"$name\",\"wall\":\"$(cut -d' ' -f1 "$W/raw/$name.wall")\",\"r\":/; s/\$/}/" \
    >> "$W/raw/sweeps.jsonl"
}
round=0
noise_round() {
  round=$((round + 1))
  if [ $((round % 2)) = 1 ]; then sweep "r$round-a" "$A" $CTXS; sweep "r$round-b" "$B" $CTXS
  else sweep "r$round-b" "$B" $CTXS; sweep "r$round-a" "$A" $CTXS; fi
  pack
}
noise_round; noise_round

# -- prefill@131072: its own run with the knob (decode@131072 comes with it) ----------------------
sweep k131072-a "$A" 131072 SPARKINFER_PREFILL_BATCHED_MAXCTX=131072
sweep k131072-b "$B" 131072 SPARKINFER_PREFILL_BATCHED_MAXCTX=131072
pack

# -- decode witnesses: a single long decode, and a timed greedy generation ------------------------
timed witness-bench-4096 "$A/qwen3_gguf_bench" "$M" 4096 0
timed witness-generate-256 "$A/qwen3_gguf_generate" "$M" 256 $PROMPT
pack

# -- qwen35moe (Qwen3.6-35B-A3B per-layer shape, 4 layers): does the engine load and run it? -----
if [ -s "$W/models/moe4.gguf" ]; then
  timed moe4-generate "$A/qwen3_gguf_generate" "$W/models/moe4.gguf" 16 $PROMPT
  timed moe4-sweep env SPARKINFER_BENCH_SWEEP_CTXS=128,512,4096 "$A/qwen3_gguf_bench" "$W/models/moe4.gguf" 128 sweep
  timed moe4-score "$A/qwen3_gguf_score" "$W/models/moe4.gguf" 8 $PROMPT
  pack
fi

while [ "$(left)" -gt 80 ]; do noise_round; done

# -- the phase-2 heads, last (they patch the trees in place): rebuild time and effect -------------
if [ "$(left)" -gt 45 ]; then
  # broken: only the tools' config header changes; A's score tool is rebuilt (A's bench is not).
  (cd "$W/a" && git apply "$ROOT/scripts/gpu_sparkinfer_heads/broken-rmsnorm-eps.patch") &&
    timed rebuild-broken cmake --build "$W/a/build" -j 16 --target qwen3_gguf_score &&
    timed score-broken "$A/qwen3_gguf_score" "$M" 8 $PROMPT $GEN
  pack
  # slow: B's bench with the int8 prefill projections cut to prompts <= 2048 (prefill@4096 only).
  (cd "$W/b" && git apply "$ROOT/scripts/gpu_sparkinfer_heads/slow-prefill.patch") &&
    timed rebuild-slow cmake --build "$W/b/build" -j 16 --target qwen3_gguf_bench &&
    sweep slow-b "$B" $CTXS
fi
log "end: $round noise rounds"
cp "$W/raw/sweeps.jsonl" "$OUT/" 2>/dev/null
pack
"$PY" - "$W/raw/sweeps.jsonl" <<'PY'
import json, sys, math
rows = [json.loads(l) for l in open(sys.argv[1])]
cells = {}
for r in rows:
    if not r["name"].startswith("r"):
        print(r["name"], r["wall"], r["r"]); continue
    side = r["name"][-1]
    for ctx, v in r["r"].items():
        for m, key in (("decode", "decode_tps"), ("prefill", "prefill_pp")):
            if v[key] > 0:
                cells.setdefault(f"{m}@{ctx}", {"a": [], "b": []})[side].append(v[key])
for k, s in cells.items():
    n = min(len(s["a"]), len(s["b"]))
    lr = [math.log(b / a) for a, b in zip(s["a"][:n], s["b"][:n])]
    mean = sum(lr) / n; sd = (sum((x - mean) ** 2 for x in lr) / (n - 1)) ** 0.5 if n > 1 else 0
    print(f"{k:16s} n={n} A={sum(s['a'])/len(s['a']):10.2f} B/A mean {100*mean:+.3f}% sd {100*sd:.3f}%")
PY
