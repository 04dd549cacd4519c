#!/usr/bin/env bash
# The llamacpp witness's step time and floor on the GPU box (docs/gpu-e2e.md): builds the pinned
# reference's llama-bench and evalbot-topk, then variants of evalbot-topk that differ in one
# context setting, and runs scripts/gpu_witness_timings.py. A detached chain (a device command
# lasts 10 minutes at most):
#
#   bash scripts/gpu_witness_timings.sh start    # first call
#   bash scripts/gpu_witness_timings.sh wait     # each next call, at once
#
# WITNESS_AA: the variant the A/A pairs time (default: base). Results: $OUT/witness.tgz.
set -uo pipefail
W=${WITNESS_WORK:-/tmp/gpu-witness}
WAIT_S=${WAIT_S:-560}
T0=$(date +%s)
mkdir -p "$W"

chain() {
  local src=$W/src R=$W/out
  mkdir -p "$R" "$W/tree" && cd "$src" || return 1
  export PATH="$PATH:/usr/local/cuda/bin"
  note "unpack, build, model"
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site shared/wheels/*.whl
  export PYTHONPATH=/tmp/site
  tar xzf shared/llama.cpp-pruned.tar.gz -C "$W/tree"
  local tree; tree=$(dirname "$(find "$W/tree" -path '*include/llama.h' | head -1)")/..
  python3 shared/synth_gguf.py shared/ggml-vocab-qwen2.gguf "$W/m.gguf" --layers 28 --embd 1024 \
    --ff 3072 --heads 16 --kv 8 --hd 128 > "$R/model.txt" 2>&1 &
  PYTHONPATH=/tmp/site:$src python3 -m engine.llamacpp.build --tree "$tree" --backend cuda --cuda-arch 90 \
    --jobs "$(nproc)" --shared-build "$W/sb" --cmake-flag=-DGGML_CUDA_FA=OFF > "$R/build.txt" 2>&1
  note "build rc=$?"; wait
  mkdir -p "$W/bin"
  variant base cat
  variant threads sed 's/cp.n_ubatch = std::min<uint32_t>(cp.n_batch, 512);/&\n    cp.n_threads = cp.n_threads_batch = 16;/'
  variant nofa sed 's/cp.n_ubatch = std::min<uint32_t>(cp.n_batch, 512);/&\n    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;/'
  variant batch2048 sed 's/cp.n_batch = (uint32_t) n_prefill;/cp.n_batch = 2048;/; s/llama_batch_get_one(ids.data(), n_prefill)/llama_batch_get_one(ids.data(), 2048)) != 0 || llama_decode(ctx, llama_batch_get_one(ids.data() + 2048, n_prefill - 2048)/; s/llama_batch_get_one(warm.data(), n_prefill)/llama_batch_get_one(warm.data(), 2048)/'
  variant nologits sed 's/out.push_back((llama_token) (std::max_element(logits, logits + n_vocab) - logits));/out.push_back(logits ? 0 : 1);/'
  note "variants built: $(ls "$W/bin" | tr '\n' ' ')"
  local bins=""; for b in "$W"/bin/*; do bins="$bins $(basename "$b")=$b"; done
  PYTHONPATH=/tmp/site:$src python3 "$src/scripts/gpu_witness_timings.py" --model "$W/m.gguf" \
    --bench "$tree/evalbot-out/llama-bench" --out "$R" --aa "${WITNESS_AA:-base}" \
    --budget-s "${WITNESS_BUDGET_S:-900}" $bins > "$R/driver.txt" 2>&1
  note "driver rc=$?: $(tail -1 "$R/driver.txt")"
}

variant() {  # name, then a filter command for topk.cpp
  local name=$1; shift
  "$@" < "$W/src/engine/llamacpp/topk.cpp" > "$W/sb/wrapper/topk.cpp"
  if cmake --build "$W/sb/build" --target evalbot-topk -j "$(nproc)" > "$W/out/variant-$name.txt" 2>&1; then
    cp "$(find "$W/sb/build" -name evalbot-topk -type f | head -1)" "$W/bin/$name"
  else note "variant $name failed to build"; fi
}

note() { echo "[$(date -u +%T)] $*" >> "$W/out/timeline.txt"; }
running() { [ -e "$W/chain.pid" ] && kill -0 "$(cat "$W/chain.pid")" 2>/dev/null; }

case ${1:-wait} in
  start)
    if running; then echo "a chain is already running"; else
      rm -rf "$W/src" && mkdir -p "$W/src" "$W/out" && cp -a . "$W/src/"
      : > "$W/out/timeline.txt"
      export -f chain variant note; export W
      setsid bash -c chain > "$W/chain.log" 2>&1 < /dev/null &
      echo $! > "$W/chain.pid"
    fi ;;
  wait) ;;
  *) echo "usage: gpu_witness_timings.sh start|wait" >&2; exit 2 ;;
esac
while running && [ $(( $(date +%s) - T0 )) -lt "$WAIT_S" ]; do sleep 5; done
running && echo "chain still running" || echo "chain ended"
cat "$W/out/timeline.txt"; tail -5 "$W/chain.log"
mkdir -p "${OUT:-$W/res}"
tar czf "${OUT:-$W/res}/witness.tgz" -C "$W" out
