#!/usr/bin/env bash
# The GPU end-to-end run of docs/gpu-e2e.md: evalbot's own pipeline (local box) on llama.cpp from
# llama-cpp-python 0.3.36, four evaluations: A/A (a docs-only head), a decode slowdown, the same
# slowdown reverted (base = slow, head = main: a real speedup) and a numerically broken head.
#
#   scripts/gpu_e2e.sh cuda|cpu [STAGE ...]     stages: setup model reference aa broken slow speedup
#
# Everything it needs comes from shared/ (carried offline): wheels/, llama.cpp-pruned.tar.gz,
# ggml-vocab-qwen2.gguf, synth_gguf.py. State lives in build/gpu-e2e-<backend>/ so a second call
# on the same machine resumes (finished stages are skipped); results go to $OUT as they appear.
# E2E_BUDGET_S bounds the whole call (default 570 s): a stage that cannot finish is cut, logged.
# E2E_MODELS: the models directory (default $W/models; scripts/gpu_session.sh shares one with the
# sparkinfer run, and with it the reference build). E2E_SPEED_BUDGET_S: the A/A's, the slow and
# the speedup evaluations' speed.budget_s (default 400: the shipped profile's A/A needs about 15
# pairs of 8 s processes at the H200 fixture's noise, bench/verdict_quality.py); the broken head is
# decided by correctness and measures for 90 s (its own profile copy).
set -uo pipefail
BACKEND=${1:-cuda}; shift || true
STAGES=${*:-setup model reference aa broken slow speedup}
ROOT=$(pwd)
W=${E2E_WORK:-$ROOT/build/gpu-e2e-$BACKEND}
OUT=${OUT:-$W/out}
JOBS=${E2E_JOBS:-$(nproc)}
BUDGET=${E2E_BUDGET_S:-570}
START=$(date +%s)
PY=$(command -v python3 || command -v python)
export PATH="$PATH:/usr/local/cuda/bin"
SRC_SHA=90e3f6adf8120749245a83e9d2bc25eecb9bb58013397b247a263b8c4d279220
M=${E2E_MODELS:-$W/models}
SPEED_BUDGET=${E2E_SPEED_BUDGET_S:-400}
mkdir -p "$W/done" "$M" "$OUT"
export ROOT W M OUT JOBS BUDGET START SRC_SHA BACKEND PY SPEED_BUDGET
log() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/timeline.txt"; }
left() { echo $(( BUDGET - ($(date +%s) - START) )); }

if [ "$BACKEND" = cuda ]; then
  MODEL_ARGS="--layers 28 --embd 1024 --ff 3072 --heads 16 --kv 8 --hd 128"
  MODEL=qwen3-0p6b-synth-f16.gguf
else
  MODEL_ARGS="--layers 2 --embd 256 --ff 512 --heads 4 --kv 2 --hd 64"
  MODEL=qwen3-tiny-synth-f16.gguf
fi
BUILD_FLAGS=${E2E_BUILD_FLAGS:-"--backend $BACKEND --jobs $JOBS --shared-build $W/shared-build --cmake-flag=-DGGML_CUDA_FA=OFF"}
export MODEL MODEL_ARGS BUILD_FLAGS

stage_setup() {
  (cd / && "$PY" -c "import scipy, rich, github, paramiko, gguf, engine.llamacpp") 2>/dev/null ||
    "$PY" -m pip install -q --no-index --find-links shared/wheels -e . gguf || return 1
  rm -rf "$W/repo" && mkdir -p "$W/repo" && tar xzf shared/llama.cpp-pruned.tar.gz -C "$W/repo" || return 1
  rm -f "$W/repo/.git"  # the vendor tree's submodule pointer (../../.git/modules/...): not a repo here
  cd "$W/repo" || return 1
  local g="git -c user.name=evalbot-e2e -c user.email=e2e@localhost"
  git init -q -b main && git add -Af && $g commit -qm "llama.cpp (llama-cpp-python 0.3.36 vendor tree)"
  # (1) the A/A head: a docs-only commit (a new SHA, the same code).
  git checkout -qb aa && echo "Benchmarks: see docs/gpu-e2e.md of evalbot." >> README.md &&
    $g commit -qam "docs: one line in the README" || return 1
  git checkout -q main  # (2) a real code change that slows decode: CUDA graphs never used (one file, ggml-cuda.cu).
  git checkout -qb slow
  sed -i 's/^    bool use_cuda_graph = true;$/    bool use_cuda_graph = false; \/\/ graphs off: launch every kernel/' \
    ggml/src/ggml-cuda/ggml-cuda.cu
  grep -q "use_cuda_graph = false; // graphs off" ggml/src/ggml-cuda/ggml-cuda.cu || return 1
  $g commit -qam "cuda: do not capture CUDA graphs"
  # (3) a numerically breaking change: qwen3 attention scaled by 1/d instead of 1/sqrt(d).
  git checkout -q main && git checkout -qb broken
  sed -i 's|1.0f/sqrtf(float(n_embd_head))|1.0f/float(n_embd_head)|' src/models/qwen3.cpp
  grep -q "1.0f/float(n_embd_head)" src/models/qwen3.cpp || return 1
  $g commit -qam "qwen3: attention scale 1/d"
  git checkout -q main
  for b in main aa slow broken; do echo "${b^^}=$(git rev-parse $b)"; done > "$W/shas.env"
  cd "$ROOT" && cp "$W/shas.env" "$OUT/"
}

stage_model() {
  "$PY" shared/synth_gguf.py shared/ggml-vocab-qwen2.gguf "$M/$MODEL" $MODEL_ARGS || return 1
  chmod a+r "$M/$MODEL"
  local sha; sha=$(sha256sum "$M/$MODEL" | cut -d' ' -f1)
  echo "$sha  $MODEL" | tee "$OUT/model.sha256"
  "$PY" - "$BACKEND" "$W" "$MODEL" "$sha" "$BUILD_FLAGS" "$SPEED_BUDGET" <<'PY' || return 1
import sys, yaml
backend, w, model, sha, flags, budget = sys.argv[1:]
p = yaml.safe_load(open("evalbot/profiles/llamacpp.yaml"))
p["name"] = f"llamacpp-e2e-{backend}"
p["build"]["argv"] = ["{python}", "{harness}/engine/llamacpp/build.py", "--tree", "{tree}", *flags.split()]
p["models"][0].update(file=model, sha256=sha)
run = p["speed"]["runs"][0]
if backend == "cpu":  # the rehearsal: a tiny model on 2 busy cores, short tests
    for flag, value in (("-p", "32"), ("-n", "16"), ("-d", "0,128"), ("-r", "2")):
        run["argv"][run["argv"].index(flag) + 1] = value
    run["cells"] = [{"metric": m, "ctx": c} for m in ("decode", "prefill") for c in (0, 128)]
    run["decode_tokens"] = 32
    p["speed"].update(sd_floor=0.03, significance=0.2, tolerance=0.2, budget_s=200)
    run.pop("timeout_s", None)
else:  # the GPU run: everything else is the shipped profile's
    p["speed"]["budget_s"] = int(budget)
yaml.safe_dump(p, open(f"{w}/llamacpp-e2e.yaml", "w"), sort_keys=False)
p["name"] += "-short"  # the broken head: correctness decides it, speed is measured briefly
p["speed"]["budget_s"] = 90
yaml.safe_dump(p, open(f"{w}/llamacpp-e2e-short.yaml", "w"), sort_keys=False)
PY
  cp "$W/llamacpp-e2e.yaml" "$W/llamacpp-e2e-short.yaml" "$OUT/"
}

stage_reference() {
  "$PY" -m engine.llamacpp.reference_build --models-dir "$M" --key src-${SRC_SHA:0:16} \
    --tarball shared/llama.cpp-pruned.tar.gz --sha256 $SRC_SHA $BUILD_FLAGS > "$OUT/reference-build.log" 2>&1
  local rc=$?; tail -3 "$OUT/reference-build.log"; return $rc
}

evaluation() {  # name, base branch, head branch, profile
  . "$W/shas.env"
  local base head; base=$(eval echo \$${2^^}); head=$(eval echo \$${3^^})
  "$PY" -m evalbot eval --repo "$W/repo" --base "$base" --head "$head" \
    --profile "$W/$4.yaml" --models-dir "$M" --workdir "$W/box" \
    --out "$OUT/eval-$1" --dry-run --json > "$OUT/eval-$1.verdict.json" 2> "$OUT/eval-$1.stderr"
  local rc=$?
  "$PY" - "$OUT/eval-$1.verdict.json" <<'PY'
import json, sys
try:
    v = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit("no verdict JSON")
print("verdict:", v.get("kind"), v.get("headline"), "correctness:", (v.get("correctness") or {}).get("decision"))
for c in v.get("cells", []):
    print(f"  {c['key']:28s} {c['decision']:12s} " + (f"{100*c['speedup']:+6.2f}% [{100*c['lo']:+.2f}, {100*c['hi']:+.2f}] pairs={c['pairs']}" if c.get("speedup") is not None else "not measured"))
PY
  cp "$OUT/eval-$1/private/results.json" "$OUT/eval-$1.results.json" 2>/dev/null ||
    cp "$OUT/eval-$1/results.json" "$OUT/eval-$1.results.json" 2>/dev/null
  pack
  return $rc
}
pack() {  # the device returns few files: everything so far in one archive, rewritten per stage
  tar czf "$W/all.tgz" -C "$OUT" --exclude=all.tgz . && cp "$W/all.tgz" "$OUT/all.tgz"
}
stage_aa() { evaluation aa main aa llamacpp-e2e; }
stage_slow() { evaluation slow main slow llamacpp-e2e; }
stage_speedup() { evaluation speedup slow main llamacpp-e2e; }
stage_broken() { evaluation broken main broken llamacpp-e2e-short; }

log "start: backend $BACKEND, stages: $STAGES, budget ${BUDGET}s, $(nproc) cores"
[ "$BACKEND" = cuda ] && nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a "$OUT/timeline.txt"
for s in $STAGES; do
  if [ -e "$W/done/$s" ]; then log "$s: done earlier, skipped"; continue; fi
  if [ "$(left)" -lt 20 ]; then log "$s: not started, budget spent"; continue; fi
  t0=$(date +%s); log "$s: start"
  export -f stage_$s evaluation log left pack 2>/dev/null
  case $s in aa|slow|speedup|broken) strict= ;; *) strict="set -e;" ;; esac
  timeout "$(left)" bash -c "$strict stage_$s" 2>&1 | tail -40 | tee "$OUT/stage-$s.log"
  rc=${PIPESTATUS[0]}
  log "$s: rc=$rc in $(( $(date +%s) - t0 ))s"
  [ "$rc" = 0 ] && touch "$W/done/$s"
  case $s in aa|slow|speedup|broken) ;; *) [ "$rc" != 0 ] && break ;; esac
done
log "end"
pack
