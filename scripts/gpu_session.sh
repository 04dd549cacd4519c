#!/usr/bin/env bash
# One device session's GPU work as one detached chain that outlives the 10-minute command limit
# (docs/gpu-e2e.md, "One session, both engines"):
#
#   bash scripts/gpu_session.sh start [both|llamacpp]   # first call: starts the chain, waits
#   bash scripts/gpu_session.sh wait                     # each next call, made at once
#
# `llamacpp` runs steps 2 and 4 only (the wheels, the reference, the llamacpp model and its
# evaluations), for a session whose sparkinfer part is done.
#
# The chain copies this checkout to $S/src first (a later call's copy of the tree cannot change
# the code under a running evaluation), then:
#   1. sparkinfer setup and box (scripts/gpu_sparkinfer.sh: the users of `evalbot box init`);
#   2. the pinned llama.cpp reference, built once for both engines with the llamacpp e2e's flags
#      (its shared build tree is then main's, so the llamacpp main build is a no-op), while the
#      three synthetic models are written;
#   3. sparkinfer: reference probes, aa, slow, broken; 4. llamacpp: aa, broken, slow, speedup;
#   5. sparkinfer speedup, if device time is left.
# LLAMA_STAGES: the llamacpp evaluations and their order (default: aa broken slow speedup).
# A call returns after WAIT_S seconds (default 560) or when the chain has ended, with everything
# so far in $OUT/session.tgz and the timeline in $OUT/timeline.txt.
set -uo pipefail
S=${GPU_SESSION:-/tmp/gpu-session}
WAIT_S=${WAIT_S:-560}
T0=$(date +%s)
mkdir -p "$S"
export S

chain() {  # both | llamacpp
  local src=$S/src
  export SPK_WORK=$S/spk SPK_BUDGET_S=100000 E2E_WORK=$S/llama E2E_BUDGET_S=100000
  export E2E_MODELS=$S/spk/models OUT_SPK=$S/spk/out
  local flags="--backend cuda --cuda-arch 90 --jobs $(nproc) --shared-build $S/llama/shared-build --cmake-flag=-DGGML_CUDA_FA=OFF"
  export E2E_BUILD_FLAGS=$flags
  cd "$src" || return 1
  if [ "$1" = llamacpp ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site shared/wheels/*.whl
  else
    note "sparkinfer setup, box"
    OUT=$OUT_SPK bash scripts/gpu_sparkinfer.sh setup box
  fi
  note "reference build (both engines) while the models are written"
  mkdir -p "$E2E_MODELS" "$S/llama"
  ( PYTHONPATH=$src python3 -m engine.llamacpp.reference_build --models-dir "$E2E_MODELS" \
      --key src-90e3f6adf8120749 --tarball shared/llama.cpp-pruned.tar.gz \
      --sha256 90e3f6adf8120749245a83e9d2bc25eecb9bb58013397b247a263b8c4d279220 $flags \
      > "$S/reference-build.txt" 2>&1; echo $? > "$S/reference.rc" ) &
  local ref=$!
  [ "$1" = llamacpp ] || OUT=$OUT_SPK bash scripts/gpu_sparkinfer.sh model
  OUT=$S/llama/out PYTHONPATH=/tmp/site:$src bash scripts/gpu_e2e.sh cuda setup model
  wait $ref
  note "reference build rc=$(cat "$S/reference.rc"): $(tail -1 "$S/reference-build.txt")"
  chmod -R a+rX "$E2E_MODELS"
  [ "$1" = llamacpp ] || OUT=$OUT_SPK bash scripts/gpu_sparkinfer.sh reference aa slow broken
  OUT=$S/llama/out PYTHONPATH=/tmp/site:$src bash scripts/gpu_e2e.sh cuda $LLAMA_STAGES
  [ "$1" = llamacpp ] || OUT=$OUT_SPK bash scripts/gpu_sparkinfer.sh speedup
  note "chain end"
}

note() { echo "[$(date -u +%T)] chain: $*" >> "$S/timeline.txt"; }

collect() {
  local out=${OUT:-$S/out}
  mkdir -p "$out"
  cat "$S/timeline.txt" "$S"/spk/log/timeline.txt "$S"/llama/out/timeline.txt > "$out/timeline.txt" 2>/dev/null
  tar czf "$out/session.tgz" -C "$S" --exclude=src --exclude=spk/repo --exclude=spk/box \
    --exclude=spk/models --exclude=llama/repo --exclude=llama/box --exclude=llama/shared-build \
    --exclude='*.gguf' --exclude=spk/eval-* . 2>/dev/null
  ls -la "$out"
}

running() { [ -e "$S/chain.pid" ] && kill -0 "$(cat "$S/chain.pid")" 2>/dev/null; }

case ${1:-wait} in
  start)
    if running; then echo "a chain is already running"; else
      rm -rf "$S/src" && mkdir -p "$S/src" && cp -a . "$S/src/"
      : > "$S/timeline.txt"
      export -f chain note
      export LLAMA_STAGES=${LLAMA_STAGES:-aa broken slow speedup}
      setsid bash -c "chain ${2:-both}" > "$S/chain.log" 2>&1 < /dev/null &
      echo $! > "$S/chain.pid"
      note "started (pid $(cat "$S/chain.pid"))"
    fi ;;
  wait) ;;
  *) echo "usage: gpu_session.sh start|wait" >&2; exit 2 ;;
esac
while running && [ $(( $(date +%s) - T0 )) -lt "$WAIT_S" ]; do sleep 5; done
running && echo "chain still running" || echo "chain ended"
tail -30 "$S/timeline.txt"
tail -40 "$S"/spk/log/timeline.txt "$S"/llama/out/timeline.txt 2>/dev/null
collect
