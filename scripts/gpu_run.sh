#!/usr/bin/env bash
# The one runner of every GPU run (docs/gpu-e2e.md, "The one command"). RUN is the issue whose
# evaluations it makes: 49 (sparkinfer's speed), 50 (the rest of sparkinfer), 51 (sparkinfer's
# correctness, on the stable Qwythos file), 52 (llama.cpp), 53 (a slowdown hidden by printing),
# 53L (the same for llama.cpp: witnesses of decode@0 and prefill@4096, their floors measured first),
# 53S (sparkinfer's 131072 run alone, 8 pairs, for its cost floor; Qwen3.6's run alone on an A/A),
# 53Q (Qwen3.6's run alone on its real shape, the 40-layer file, no witnesses, 2 pairs), 53O (the
# same run with issue 53's threshold offset on prefill@16384).
#
#   bash scripts/gpu_run.sh plan RUN [OPTIONS]    the stages in order (done ones marked), what each
#                                                 runs, and the shared/ files the run needs with sizes
#   bash scripts/gpu_run.sh start RUN [OPTIONS]   first device call: the detached chain, then waits
#   bash scripts/gpu_run.sh wait [--wait-s S]     each next call, at once: waits, then collects
#   bash scripts/gpu_run.sh summary RUN           the summary of what has run (summary.md)
#   bash scripts/gpu_run.sh check-heads           every head's edits against shared/'s tarballs
#
# OPTIONS (scripts/gpu_runner/__main__.py): --only NAME[,NAME...], --warm, --budget-s S, --jobs N,
# --ab-pairs N; --wait-s S (start and wait: how long this call waits, default 560); --state DIR
# (where the chains keep their state and copy of the checkout, default /tmp/gpu-run).
# A device command lasts 10 minutes at most: `start` copies this checkout to $S/src (a later
# call's copy cannot change the code under a running evaluation) and starts the chain
# (python3 -m gpu_runner run) with setsid; it keeps its state in $S/RUN, so a second `start` of
# the same run on a warm machine skips the finished stages. A call returns after --wait-s seconds
# or when the chain has ended, with $OUT/summary.md, summary.json, timeline.txt and run-RUN.tgz
# (logs, profiles, each evaluation's verdict, results and comment), and llamacpp-reference.tgz
# when the reference was built on this machine (for a later session to carry).
set -uo pipefail
S=/tmp/gpu-run
HERE=$(cd "$(dirname "$0")/.." && pwd)
WAIT_S=560
cmd=${1:-}; shift || true
args=()
while [ $# -gt 0 ]; do
  case $1 in --wait-s) WAIT_S=$2; shift 2 ;; --state) S=$2; shift 2 ;; *) args+=("$1"); shift ;; esac
done
mkdir -p "$S"
runner() { (cd "$1" && PYTHONPATH="$1/scripts${PYTHONPATH:+:$PYTHONPATH}" python3 -m gpu_runner "${@:2}"); }
running() { [ -e "$S/chain.pid" ] && kill -0 "$(cat "$S/chain.pid")" 2>/dev/null; }

collect() {  # the current run's summary and files into $OUT
  local run out w
  run=$(head -1 "$S/current" 2>/dev/null) || return 0
  w=$S/$run out=${OUT:-$S/out}
  mkdir -p "$out"
  # the chain's own evaluations (its --only), from the arguments `start` kept
  PYTHONPATH=/tmp/site runner "$S/src" summary $(tail -n +2 "$S/current") --work "$w" > /dev/null 2>&1
  cp "$w/summary.md" "$w/summary.json" "$w/timeline.txt" "$out/" 2>/dev/null
  tar czf "$out/run-$run.tgz" -C "$w" --exclude=./repo --exclude=./box --exclude=./models \
    --exclude=./ab-build --exclude='*.gguf' --exclude='./eval/*/artifacts' . 2>/dev/null
  if ! running && [ -e "$w/log/reference-build.txt" ] && [ -d "$w/models/llamacpp-reference" ]; then
    tar czf "$out/llamacpp-reference.tgz" -C "$w/models" llamacpp-reference 2>/dev/null
    [ "$(stat -c %s "$out/llamacpp-reference.tgz")" -lt 60000000 ] || rm -f "$out/llamacpp-reference.tgz"
  fi
  ls -la "$out"
}

case $cmd in
  plan|summary|check-heads)
    [ "$cmd" = summary ] && [ -n "${args[0]:-}" ] && args+=(--work "$S/${args[0]}")
    runner "$HERE" "$cmd" "${args[@]}"; exit $? ;;
  start)
    run=${args[0]:-}
    if running; then echo "a chain is already running: $(cat "$S/current")"; else
      runner "$HERE" plan "${args[@]}" --work "$S/$run" || exit 2  # a bad option stops here, before any copy
      rm -rf "$S/src" && mkdir -p "$S/src" && cp -a "$HERE/." "$S/src/"
      printf '%s\n' "$run" "${args[@]}" > "$S/current"  # the run, then its arguments, one a line
      export S
      setsid bash -c "$(declare -f runner); runner \"$S/src\" run ${args[*]} --work \"$S/$run\"" \
        > "$S/chain-$run.log" 2>&1 < /dev/null &
      echo $! > "$S/chain.pid"
      echo "started run $run (pid $(cat "$S/chain.pid"))"
    fi ;;
  wait) ;;
  *) echo "usage: gpu_run.sh plan|start|wait|summary|check-heads [RUN] [OPTIONS]" >&2; exit 2 ;;
esac
T0=$(date +%s)
while running && [ $(( $(date +%s) - T0 )) -lt "$WAIT_S" ]; do sleep 5; done
running && echo "chain still running" || echo "chain ended"
tail -30 "$S/$(head -1 "$S/current" 2>/dev/null)/timeline.txt" 2>/dev/null
collect
cat "${OUT:-$S/out}/summary.md" 2>/dev/null
