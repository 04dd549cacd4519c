#!/usr/bin/env bash
# Phase 2 of the sparkinfer GPU work (docs/gpu-e2e.md, "sparkinfer"): evalbot's own pipeline on
# sparkinfer ba8add3 with the shipped profile's settings, on the local box with the sandbox of
# `evalbot box init`, four evaluations:
#   aa       main vs a docs-only commit                  expected: neutral in every cell
#   slow     main vs the int8 prefill projections cut to <= 2048 tokens (prefill@4096 -28.6% in
#            phase 1, nothing else)                       expected: prefill@4096 regressed only
#   speedup  base = slow, head = main (the slowdown removed) expected: prefill@4096 improved
#   broken   main vs rms_eps x 1e5 in the tools' config    expected: correctness REJECT
#
#   bash scripts/gpu_sparkinfer.sh [STAGE ...]   stages: setup box model refbuild reference aa slow
#                                                 speedup broken
#
# Everything comes from shared/ of the checkout the device receives (ignored by git): wheels/,
# sparkinfer-ba8add3.tar.gz, ggml-vocab-qwen35.gguf, llama.cpp-pruned.tar.gz (llama-cpp-python
# 0.3.36's vendor/llama.cpp, which has the qwen35 and qwen35moe architectures). State lives in
# $SPK_WORK (default /tmp/gpu-sparkinfer) so a second call on the same warm machine resumes
# (finished stages are skipped); results go to $OUT as they appear (all.tgz, rewritten per stage).
# SPK_BUDGET_S bounds the call (default 570 s): a stage that cannot start in time is skipped.
# SPK_STABLE=1 writes the Qwythos file with STABLE_SYNTH's values (scripts/synth_stability.sh: a
# model the engine and the reference agree on) in place of shared/synth_qwen35.py's.
set -uo pipefail
STAGES=${*:-setup box model reference aa slow speedup broken}
ROOT=$(pwd)
W=${SPK_WORK:-/tmp/gpu-sparkinfer}
OUT=${OUT:-$W/out}
BUDGET=${SPK_BUDGET_S:-570}
START=$(date +%s)
PY=${SPK_PYTHON:-$(command -v python3)}
SANDBOX=evalbot-sandbox
REF_SHA=${REF_SHA:-90e3f6adf8120749245a83e9d2bc25eecb9bb58013397b247a263b8c4d279220}  # another packing: pass its sha
REF_KEY=src-${REF_SHA:0:16}
STABLE_SYNTH="--embd-scale 1 --branch-scale 0.001 --output-norm 3"  # docs/gpu-e2e.md, fourth part
export PATH="$PATH:/usr/local/cuda/bin" PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p "$W/done" "$W/models" "$W/log" "$OUT"
echo "$REF_KEY" > "$W/ref-key.txt"  # the key the e2e profiles name (the acceptance reads it)
export ROOT W OUT BUDGET START PY SANDBOX REF_SHA REF_KEY STABLE_SYNTH
log() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$W/log/timeline.txt"; }
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
pack() { cp "$W/log/timeline.txt" "$OUT/"; tar czf "$OUT/all.tgz" -C "$W/log" . ; }
fail() { echo "FAIL [$STAGE]: $*" >&2; return 1; }
need() { for f in "$@"; do [ -e "$ROOT/shared/$f" ] || { fail "shared/$f is missing"; return 1; }; done; }

stage_setup() {  # wheels, and the engine repository with its four heads as real commits
  need wheels sparkinfer-ba8add3.tar.gz ggml-vocab-qwen35.gguf || return 1
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    "$ROOT"/shared/wheels/*.whl || fail "pip install of shared/wheels" || return 1
  (cd "$ROOT" && "$PY" -c "import github, paramiko, waitress, gguf, scipy, rich, evalbot") ||
    fail "evalbot's dependencies do not import" || return 1
  rm -rf "$W/repo" && mkdir -p "$W/repo" && tar xzf "$ROOT/shared/sparkinfer-ba8add3.tar.gz" -C "$W/repo"
  cd "$W/repo" || return 1
  local g="git -c user.name=evalbot-e2e -c user.email=e2e@localhost"
  git init -q -b main && git add -Af && $g commit -qm "sparkinfer ba8add3 (CMakeLists, kernels, moe, runtime)"
  git checkout -qb aa && echo "Benchmarks: see docs/gpu-e2e.md of evalbot." >> runtime/README.md &&
    $g commit -qam "docs: one line in the runtime README" || fail "aa head" || return 1
  git checkout -q main && git checkout -qb slow &&
    git apply "$ROOT/scripts/gpu_sparkinfer_heads/slow-prefill.patch" &&
    $g commit -qam "prefill: int8 projections for prompts up to 2048 tokens" || fail "slow head" || return 1
  git checkout -q main && git checkout -qb broken &&
    git apply "$ROOT/scripts/gpu_sparkinfer_heads/broken-rmsnorm-eps.patch" &&
    $g commit -qam "config: rms eps in the tools' units" || fail "broken head" || return 1
  git checkout -q main
  for b in main aa slow broken; do echo "${b^^}=$(git rev-parse $b)"; done > "$W/shas.env"
  chmod -R a+rX "$W/repo"
  cp "$W/shas.env" "$W/log/"
}

stage_box() {  # the users of `evalbot box init`, and proof that the sandbox user sees the GPU
  # The device image (Ubuntu 24.04, no network) lacks bubblewrap and sudo, which `box init`
  # installs from the network on a real box: install the Debian packages carried in shared/debs/
  # (`apt-get download bubblewrap sudo` on a machine that has them; their dependencies are there).
  command -v bwrap >/dev/null && command -v sudo >/dev/null ||
    dpkg -i "$ROOT"/shared/debs/*.deb > "$W/log/debs.txt" 2>&1 ||
    fail "bubblewrap/sudo missing and shared/debs/ does not install them (debs.txt)" || return 1
  cd "$ROOT" && "$PY" -m evalbot box init --no-install --workdir "$W/box" --python "$PY" 2>&1 | tail -5
  id "$SANDBOX" >/dev/null 2>&1 || fail "box init did not create $SANDBOX" || return 1
  ls -l /dev/nvidia* 2>&1 | tee "$W/log/dev-nvidia.txt"
  # Through the real launcher (engine/sandbox/sandbox_exec.py: new net/UTS/IPC namespaces, no groups,
  # no new privileges, exactly the given environment) with the run stage's limits (nproc 1024,
  # nofile 4096, no address-space cap: CUDA reserves far more virtual memory than it uses).
  local probe="import ctypes; c=ctypes.CDLL('libcuda.so.1'); n=ctypes.c_int(); assert c.cuInit(0)==0 and c.cuDeviceGetCount(ctypes.byref(n))==0 and n.value>0; print('cuInit ok, devices', n.value)"
  sandboxed() {  # extra env JSON, argv...
    local extra=$1; shift
    "$PY" -I engine/sandbox/sandbox_exec.py run "{\"user\":\"$SANDBOX\",\"cwd\":\"/tmp\",\"limits\":{\"nproc\":1024,\"nofile\":4096,\"fsize_mb\":1024},\"env\":{\"PATH\":\"$PATH\",\"LC_ALL\":\"C\",\"HOME\":\"/tmp\"$extra}}" -- "$@"
  }
  : > "$W/sandbox-env.txt"
  if ! sandboxed "" "$PY" -c "$probe" 2>&1 | tee "$W/log/sandbox-gpu.txt" | grep -q "cuInit ok"; then
    [ -n "${LD_LIBRARY_PATH:-}" ] && sandboxed ",\"LD_LIBRARY_PATH\":\"$LD_LIBRARY_PATH\"" "$PY" -c "$probe" 2>&1 |
      tee -a "$W/log/sandbox-gpu.txt" | grep -q "cuInit ok" &&
      echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" > "$W/sandbox-env.txt" &&
      log "the sandbox needs LD_LIBRARY_PATH for libcuda: the e2e profile's env carries it"
    [ -s "$W/sandbox-env.txt" ] ||
      fail "CUDA cannot initialise as $SANDBOX in the sandbox: it needs read+write on /dev/nvidiactl, /dev/nvidia0 and /dev/nvidia-uvm without extra groups (see dev-nvidia.txt, sandbox-gpu.txt)" || return 1
  fi
  sandboxed "" nvidia-smi -L 2>&1 | tee -a "$W/log/sandbox-gpu.txt"
  [ "$(id -u)" = 0 ] && log "harness as root: it enters the sandbox directly (docs/box.md)"
  return 0
}

stage_model() {  # the two synthetic models (written in parallel) and the e2e profile
  cd "$ROOT" || return 1
  if [ "${SPK_STABLE:-0}" = 1 ]; then
    "$PY" scripts/gpu_synth_qwen35.py shared/ggml-vocab-qwen35.gguf "$W/models/qwythos-synth.gguf" \
      --outtype q4_k_m $STABLE_SYNTH > "$W/log/synth-qwythos.txt" 2>&1
  else
    "$PY" shared/synth_qwen35.py shared/ggml-vocab-qwen35.gguf "$W/models/qwythos-synth.gguf" \
      --outtype q4_k_m > "$W/log/synth-qwythos.txt" 2>&1
  fi & local p1=$!
  "$PY" scripts/gpu_synth_qwen35.py shared/ggml-vocab-qwen35.gguf "$W/models/qwen36-synth-4l.gguf" \
    --outtype q4_k_m --qwen36 --layers 4 > "$W/log/synth-qwen36.txt" 2>&1 & local p2=$!
  wait $p1 || fail "synth_qwen35.py (see synth-qwythos.txt)" || return 1
  wait $p2 || fail "gpu_synth_qwen35.py --qwen36 (see synth-qwen36.txt)" || return 1
  chmod -R a+rX "$W/models"
  (cd "$W/models" && sha256sum qwythos-synth.gguf qwen36-synth-4l.gguf) | tee "$W/log/models.sha256"
  "$PY" scripts/gpu_sparkinfer_profile.py evalbot/profiles/sparkinfer.yaml "$W/log/models.sha256" \
    "$REF_KEY" $(cat "$W/sandbox-env.txt" 2>/dev/null) > "$W/sparkinfer-e2e.yaml" ||
    fail "e2e profile" || return 1
  "$PY" -c "from evalbot.evaluation.profile import load_profile; load_profile('$W/sparkinfer-e2e.yaml')" ||
    fail "the e2e profile does not load" || return 1
  cp "$W/sparkinfer-e2e.yaml" "$W/log/"
}

stage_refbuild() {  # the pinned llama.cpp (qwen35 architecture) the correctness compares with
  # scripts/gpu_session.sh builds it once for both engines' runs (the llamacpp e2e's flags);
  # the manifest says it is there, and the harness re-verifies it before every use. A stage of
  # its own so that a chain can build it while the models are written (it needs no model).
  cd "$ROOT" || return 1
  need llama.cpp-pruned.tar.gz || return 1
  mkdir -p "$W/models"
  local ref=$W/models/llamacpp-reference/$REF_KEY carried
  # a build made ahead (scripts/build_reference_ahead.sh, on another distribution: .tar.xz) or
  # by an earlier machine (the acceptance chain returns .tgz): trusted only once it is whole and
  # runs here, else built here
  carried=$(ls "$ROOT"/shared/llamacpp-reference.tar.xz "$ROOT"/shared/llamacpp-reference.tgz 2>/dev/null | head -1)
  if [ ! -e "$ref/manifest.json" ] && [ -n "$carried" ]; then
    if "$PY" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')" \
         "$carried" "$W/models" && carried_reference_runs "$ref"; then
      log "reference: the carried build ${carried##*/}, it runs here ($(grep -m1 CUDA0 "$W/log/reference-carried.txt"))"
    else
      rm -rf "$ref"
      log "reference: the carried build does not run here (see reference-carried.txt): building it here"
    fi
  fi
  if [ ! -e "$ref/manifest.json" ]; then
    "$PY" -m engine.llamacpp.reference_build --models-dir "$W/models" --key "$REF_KEY" \
      --tarball shared/llama.cpp-pruned.tar.gz --sha256 "$REF_SHA" --backend cuda --cuda-arch 90 \
      --jobs "$(nproc)" --cmake-flag=-DGGML_CUDA_FA=OFF > "$W/log/reference-build.txt" 2>&1 ||
      fail "llama.cpp reference build (see reference-build.txt)" || return 1
  fi
  tail -2 "$W/log/reference-build.txt" 2>/dev/null  # none when the carried build runs
  return 0
}

carried_reference_runs() {  # DIR: its artifacts match the manifest, load every library, see the GPU
  local dir=$1 bin
  {
    "$PY" -c "import sys; from engine.llamacpp.manifest import verified_tool; verified_tool(__import__('pathlib').Path(sys.argv[1]))" "$dir" ||
      return 1
    for bin in llama-bench evalbot-topk; do
      echo "== ldd $bin" && ldd "$dir/$bin" || return 1
      ! ldd "$dir/$bin" | grep -q "not found" || return 1
    done
    # usage and exit 64 without arguments; LD_BIND_NOW resolves every symbol the binaries use now,
    # so a library with a missing symbol fails here rather than in the middle of a scoring
    LD_BIND_NOW=1 "$dir/evalbot-topk"; [ $? = 64 ] || return 1
    local devices; devices=$(LD_BIND_NOW=1 "$dir/llama-bench" --list-devices 2>&1)
    echo "$devices" && grep -q "CUDA0" <<< "$devices"
  } > "$W/log/reference-carried.txt" 2>&1
}

stage_reference() {  # the reference built (stage refbuild, if not yet), and a probe per model
  stage_refbuild || return 1
  chmod -R a+rX "$W/models"
  # Can the reference score each model? The first must (or correctness cannot run); without the
  # second, the e2e profile scores the first only and the log says so.
  "$PY" -c "import random; r=random.Random(20); print([[r.randrange(1000, 150000) for _ in range(64)]])" > "$W/probe.json"
  local m
  for m in qwythos-synth qwen36-synth-4l; do
    "$PY" engine/llamacpp/score.py --reference "$REF_KEY" --model "$W/models/$m.gguf" \
      --tokens "$W/probe.json" --topk 8 --out "$W/probe-$m.json" > "$W/log/probe-$m.txt" 2>&1 &&
      log "reference scores $m" && continue
    [ $m = qwythos-synth ] && { fail "the reference cannot score $m (see probe-$m.txt)"; return 1; }
    log "the reference cannot score $m (probe-$m.txt): e2e profile without correctness guards"
    "$PY" scripts/gpu_sparkinfer_profile.py evalbot/profiles/sparkinfer.yaml "$W/log/models.sha256" \
      "$REF_KEY" --no-guards $(cat "$W/sandbox-env.txt" 2>/dev/null) > "$W/sparkinfer-e2e.yaml" &&
      cp "$W/sparkinfer-e2e.yaml" "$W/log/" || { fail "e2e profile"; return 1; }
  done
}

evaluation() {  # name, base branch, head branch
  . "$W/shas.env"
  local base head; base=$(eval echo \$${2^^}); head=$(eval echo \$${3^^})
  cd "$ROOT" && "$PY" scripts/gpu_sparkinfer_eval.py --repo "$W/repo" --base "$base" --head "$head" \
    --profile "$W/sparkinfer-e2e.yaml" --models-dir "$W/models" --workdir "$W/box" \
    --out "$W/eval-$1" --sandbox-user "$SANDBOX" > "$W/log/eval-$1.verdict.json" 2> "$W/log/eval-$1.stderr"
  local rc=$?
  cp "$W/eval-$1/comment.md" "$W/log/eval-$1.comment.md" 2>/dev/null
  cp "$W/eval-$1/private/results.json" "$W/log/eval-$1.results.json" 2>/dev/null ||
    cp "$W/eval-$1/results.json" "$W/log/eval-$1.results.json" 2>/dev/null
  "$PY" - "$W/log/eval-$1.verdict.json" <<'PY'
import json, sys
try:
    v = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit("no verdict JSON (see the stderr file)")
print("verdict:", v.get("kind"), v.get("headline"), "correctness:", (v.get("correctness") or {}).get("decision"))
for c in v.get("cells", []):
    print(f"  {c['key']:36s} {c['decision']:12s} " + (f"{100*c['speedup']:+6.2f}% [{100*c['lo']:+.2f}, {100*c['hi']:+.2f}] pairs={c['pairs']}" if c.get("speedup") is not None else "not measured"))
PY
  [ $rc = 0 ] || { tail -5 "$W/log/eval-$1.stderr"; fail "evaluation $1 exited $rc"; }
}
stage_aa() { evaluation aa main aa; }
stage_slow() { evaluation slow main slow; }
stage_speedup() { evaluation speedup slow main; }
stage_broken() { evaluation broken main broken; }

log "start: stages: $STAGES, budget ${BUDGET}s, $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> "$W/log/timeline.txt" 2>&1
for STAGE in $STAGES; do
  export STAGE
  if [ -e "$W/done/$STAGE" ]; then log "$STAGE: done earlier, skipped"; continue; fi
  if [ "$(left)" -lt 30 ]; then log "$STAGE: not started, budget spent"; continue; fi
  t0=$(date +%s); log "$STAGE: start"
  export -f stage_$STAGE stage_refbuild carried_reference_runs evaluation log left fail need 2>/dev/null
  timeout "$(left)" bash -c "stage_$STAGE" 2>&1 | tail -40 | tee "$W/log/stage-$STAGE.txt"
  rc=${PIPESTATUS[0]}
  log "$STAGE: rc=$rc in $(( $(date +%s) - t0 ))s"
  pack
  if [ "$rc" = 0 ]; then touch "$W/done/$STAGE"; continue; fi
  case $STAGE in aa|slow|speedup|broken) ;; *) log "stopping: $STAGE failed"; break ;; esac
done
log "end"
pack
