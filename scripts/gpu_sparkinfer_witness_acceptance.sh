#!/usr/bin/env bash
# Issue 30's GPU acceptance on the H200, as one detached chain that outlives the 10-minute
# command limit (the pattern of scripts/gpu_session.sh):
#
#   bash scripts/gpu_sparkinfer_witness_acceptance.sh start [EVAL ...]   # first call
#   bash scripts/gpu_sparkinfer_witness_acceptance.sh wait                # each next call, at once
#
# ACCEPT_EVALS names the evaluations (default: all); ACCEPT_NO_CORRECTNESS=1 runs every one
# without the correctness section (and builds no reference); ACCEPT_NO_128K=1 drops the 131072 run (31 s
# a sample: for a GPU session too short for it; docs/gpu-e2e.md lists it as a change);
# ACCEPT_CORRECTNESS="aa prefill-4k" keeps the correctness section for the evaluations named;
# ACCEPT_WARM=1 warms the reference's whole window grid (scripts/gpu_warm_reference.py) before
# the first evaluation, timed; ACCEPT_STABLE=1 scores a Qwythos file the engine and the reference agree on (SPK_STABLE of
# scripts/gpu_sparkinfer.sh) with the shipped profile's floors (none: the policy's).
#
# The chain copies this checkout to $S/src first, then:
#   1. scripts/gpu_sparkinfer.sh setup box model reference (SPK_WORK=$S/spk): the wheels, the
#      engine repository with main/aa/slow/broken, `evalbot box init`'s users, both synthetic
#      models, the pinned llama.cpp reference from the tarball;
#   2. the acceptance's heads (scripts/gpu_sparkinfer_witness_acceptance.py heads) and two e2e
#      profiles: the shipped one with only model files, pins, the reference's key, calibrated
#      floors and the box's env changed, with and without its correctness section
#      (ACCEPT_QWEN36=1 keeps the second model, on the 4-layer qwen35moe file);
#   3. the evaluations (all of EVALUATIONS in the .py, or the ones named), each through
#      scripts/gpu_sparkinfer_eval.py (`evalbot eval --dry-run` as the sandbox user), the
#      summary rewritten after each: verdict against the expected one, box time per stage.
# Finished evaluations are skipped on a later `start` while the machine is warm; a fresh machine
# repeats step 1 (about 5 minutes). A call returns after WAIT_S seconds (default 560) or when the
# chain has ended, with everything so far in $OUT/acceptance.tgz and $OUT/summary.txt.
#
# Needs (carried in shared/, ignored by git): wheels/ (evalbot's dependencies and gguf, cp312),
# sparkinfer-ba8add3.tar.gz, ggml-vocab-qwen35.gguf, synth_qwen35.py, and llama.cpp-pruned.tar.gz
# where an evaluation scores correctness.
set -uo pipefail
S=${ACCEPT_WORK:-/tmp/spk-accept}
WAIT_S=${WAIT_S:-560}
T0=$(date +%s)
mkdir -p "$S"
export S

chain() {
  local src=$S/src W=$S/spk
  export SPK_WORK=$W SPK_BUDGET_S=100000 OUT_SPK=$W/out SPK_STABLE=${ACCEPT_STABLE:-0}
  export PYTHONPATH=/tmp/site  # where scripts/gpu_sparkinfer.sh setup installs the wheels
  cd "$src" || return 1
  # the reference (llama.cpp, minutes to build) only where an evaluation scores correctness
  local stages="setup box model" evals_all
  evals_all=${ACCEPT_EVALS:-$(python3 -c "
import sys; sys.path.insert(0, 'scripts')
from gpu_sparkinfer_witness_acceptance import EVALUATIONS
print(' '.join(e[0] for e in EVALUATIONS))")}
  python3 -c "
import sys; sys.path.insert(0, 'scripts')
from gpu_sparkinfer_witness_acceptance import EVALUATIONS
sys.exit(0 if any(e[4] or e[0] in '${ACCEPT_CORRECTNESS:-}'.split()
                  for e in EVALUATIONS if e[0] in '$evals_all'.split()) else 1)" &&
    [ "${ACCEPT_NO_CORRECTNESS:-0}" != 1 ] &&
    stages="$stages reference"
  note "stages: $stages"
  if [[ $stages == *reference* ]]; then  # the reference builds (minutes) while the models are written
    OUT=$OUT_SPK bash scripts/gpu_sparkinfer.sh setup box || { note "setup failed"; return 1; }
    OUT=$OUT_SPK bash scripts/gpu_sparkinfer.sh refbuild > "$S/refbuild.txt" 2>&1 &
    local refbuild=$!
    OUT=$OUT_SPK bash scripts/gpu_sparkinfer.sh model || { note "model failed"; return 1; }
    wait $refbuild
    note "reference build: $(tail -1 "$S/refbuild.txt")"
  fi
  OUT=$OUT_SPK bash scripts/gpu_sparkinfer.sh $stages || { note "setup failed"; return 1; }
  for st in $stages; do
    [ -e "$W/done/$st" ] || { note "stage $st failed (spk/log/stage-$st.txt)"; return 1; }
  done
  if [ ! -e "$S/heads.env" ]; then
    python3 scripts/gpu_sparkinfer_witness_acceptance.py heads "$W/repo" > "$S/heads.env" ||
      { note "heads failed"; return 1; }
    chmod -R a+rX "$W/repo"
  fi
  local key env flags=""
  key=$(cat "$W/ref-key.txt")  # scripts/gpu_sparkinfer.sh's REF_KEY
  env=$(cat "$W/sandbox-env.txt" 2>/dev/null)
  [ "${ACCEPT_QWEN36:-0}" = 1 ] && flags=--qwen36
  [ "${ACCEPT_NO_128K:-0}" = 1 ] && flags="$flags --no-128k"  # a short GPU session: say so
  [ "${ACCEPT_STABLE:-0}" = 1 ] && flags="$flags --stable"  # the policy's floors, as shipped
  for corr in with without; do
    python3 scripts/gpu_sparkinfer_witness_acceptance.py profile evalbot/profiles/sparkinfer.yaml \
      "$W/log/models.sha256" "$key" $flags $([ $corr = without ] && echo --no-correctness) $env \
      > "$S/profile-$corr.yaml" || { note "profile $corr failed"; return 1; }
    python3 -c "from evalbot.evaluation.profile import load_profile; load_profile('$S/profile-$corr.yaml')" ||
      { note "profile $corr does not load"; return 1; }
  done
  local evals=${ACCEPT_EVALS:-$(python3 -c "
import sys; sys.path.insert(0, 'scripts')
from gpu_sparkinfer_witness_acceptance import EVALUATIONS
print(' '.join(e[0] for e in EVALUATIONS))")}
  if [ "${ACCEPT_WARM:-0}" = 1 ] && [ ! -e "$S/done-warm" ]; then
    warm "$S/profile-with.yaml" && touch "$S/done-warm"
  fi
  for name in $evals; do
    [ -e "$S/done-$name" ] && { note "$name: done earlier"; continue; }
    evaluate "$name" && touch "$S/done-$name"
    python3 scripts/gpu_sparkinfer_witness_acceptance.py summary "$S/eval" > "$S/summary.txt" 2>&1
  done
  note "chain end"
}

evaluate() {  # name: base, head and correctness from EVALUATIONS
  local name=$1 line base head corr
  line=$(python3 -c "
import sys; sys.path.insert(0, 'scripts')
from gpu_sparkinfer_witness_acceptance import EVALUATIONS
print(next(f'{b} {h} {c}' for n, b, h, _, c in EVALUATIONS if n == '$name'))") || { note "$name: unknown"; return 1; }
  read -r base head corr <<< "$line"
  # ACCEPT_CORRECTNESS names the evaluations that keep the correctness section, whatever
  # EVALUATIONS says (the verdict-cost run: an A/A and one honest head, both with it)
  [[ " ${ACCEPT_CORRECTNESS:-} " == *" $name "* ]] && corr=True
  . "$S/spk/shas.env"; . "$S/heads.env"
  local bv=${base^^} hv=${head^^} b h  # heads.env names a branch in capitals, '-' as '_'
  b=$(eval echo \$${bv//-/_}); h=$(eval echo \$${hv//-/_})
  b=${b:-$(git -C "$S/spk/repo" rev-parse "$base")}; h=${h:-$(git -C "$S/spk/repo" rev-parse "$head")}
  local profile=$S/profile-without.yaml
  [ "$corr" = True ] && [ "${ACCEPT_NO_CORRECTNESS:-0}" != 1 ] && profile=$S/profile-with.yaml
  mkdir -p "$S/eval"
  note "$name: base $base ${b:0:10}, head $head ${h:0:10}, $(basename "$profile")"
  local t0; t0=$(date +%s)
  python3 scripts/gpu_sparkinfer_eval.py --repo "$S/spk/repo" --base "$b" --head "$h" \
    --profile "$profile" --models-dir "$S/spk/models" --workdir "$S/spk/box" \
    --out "$S/eval/eval-$name" --sandbox-user evalbot-sandbox \
    > "$S/eval/eval-$name.verdict.json" 2> "$S/eval/eval-$name.stderr"
  local rc=$?
  note "$name: rc=$rc in $(( $(date +%s) - t0 ))s: $(python3 -c "
import json; v = json.load(open('$S/eval/eval-$name.verdict.json')); print(v.get('headline'), v.get('kind'))" 2>&1 | tail -1)"
  return $rc
}

warm() {  # the reference's whole window grid, once per box (scripts/gpu_warm_reference.py)
  note "warm: start"
  local t0; t0=$(date +%s)
  python3 scripts/gpu_warm_reference.py --profile "$1" --models-dir "$S/spk/models" \
    --workdir "$S/spk/box" --batch 64 > "$S/warm.txt" 2>&1
  local rc=$?
  note "warm: rc=$rc in $(( $(date +%s) - t0 ))s: $(tail -1 "$S/warm.txt")"
  return $rc
}

note() { echo "[$(date -u +%T)] $*" >> "$S/timeline.txt"; }

collect() {
  local out=${OUT:-$S/out}
  mkdir -p "$out"
  cat "$S/timeline.txt" "$S"/spk/log/timeline.txt > "$out/timeline.txt" 2>/dev/null
  cp "$S/summary.txt" "$S/warm.txt" "$out/" 2>/dev/null
  # the score tool's own per-window seconds (stderr, in each job's score logs, which stay on the
  # box): where a side's correctness time goes
  grep -H "witness-score:" "$S"/spk/box/jobs/*/logs/score-*.log > "$S/score-timings.txt" 2>/dev/null
  tar czf "$out/acceptance.tgz" -C "$S" --exclude=src --exclude=spk/repo --exclude=spk/box \
    --exclude=spk/models --exclude='*.gguf' --exclude='eval/eval-*/artifacts' . 2>/dev/null
  ls -la "$out"
}

running() { [ -e "$S/chain.pid" ] && kill -0 "$(cat "$S/chain.pid")" 2>/dev/null; }

case ${1:-wait} in
  start)
    if running; then echo "a chain is already running"; else
      rm -rf "$S/src" && mkdir -p "$S/src" && cp -a . "$S/src/"
      touch "$S/timeline.txt"
      shift
      export ACCEPT_EVALS="${*:-${ACCEPT_EVALS:-}}"
      export -f chain evaluate warm note
      setsid bash -c chain > "$S/chain.log" 2>&1 < /dev/null &
      echo $! > "$S/chain.pid"
      note "started (pid $(cat "$S/chain.pid")): ${ACCEPT_EVALS:-every evaluation}"
    fi ;;
  wait) ;;
  *) echo "usage: gpu_sparkinfer_witness_acceptance.sh start [EVAL ...] | wait" >&2; exit 2 ;;
esac
while running && [ $(( $(date +%s) - T0 )) -lt "$WAIT_S" ]; do sleep 5; done
running && echo "chain still running" || echo "chain ended"
# the reference's CUDA build, once the chain has ended, for a later session to carry (about
# 3 minutes of every fresh machine's set-up); left out where it is too large to come back
if ! running && [ -d "$S/spk/models/llamacpp-reference" ] && [ -n "${OUT:-}" ]; then
  tar czf "$OUT/llamacpp-reference.tgz" -C "$S/spk/models" llamacpp-reference 2>/dev/null
  [ "$(stat -c %s "$OUT/llamacpp-reference.tgz" 2>/dev/null || echo 0)" -lt 60000000 ] ||
    rm -f "$OUT/llamacpp-reference.tgz"
fi
tail -30 "$S/timeline.txt"
cat "$S/summary.txt" 2>/dev/null
collect
