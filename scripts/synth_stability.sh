#!/usr/bin/env bash
# How far a synthetic Qwythos file can stand in for a real model in a correctness test, measured
# on the CPU (docs/gpu-e2e.md, fourth part): for each set of scripts/gpu_synth_qwen35.py values,
#   rounding   the top-1 agreement and KL between the file and the same file with 0.2% of its
#              Q4_K weights one quantum off (on the default values this matches llama.cpp's CPU
#              build against its CUDA build on the device: 44% against 51% of the top-1s);
#   context    the share of positions 64..126 whose top-1 stays when the 64 ids before are
#              replaced (how much the positions use their context).
#
#   bash scripts/synth_stability.sh EVALBOT_TOPK VOCAB.gguf   # about 3 minutes a row on 2 cores
#
# EVALBOT_TOPK: engine/llamacpp/topk.cpp built against the pinned llama.cpp for the CPU
# (python -m evalbot.engine.llamacpp.reference_build --backend cpu --tarball ... --key K).
set -euo pipefail
TOPK=$1 VOCAB=$2 T=${TMPDIR:-/tmp}/synth-stability
mkdir -p "$T"
python3 - "$T" <<'PY'
import random, sys
r = random.Random(7)
a = [r.randrange(1000, 150000) for _ in range(128)]
b = [r.randrange(1000, 150000) for _ in range(64)] + a[64:]
for name, ids in (("a", a), ("b", b)):
    open(f"{sys.argv[1]}/{name}.txt", "w").write(" ".join(map(str, ids)) + "\n")
PY
score() {  # name, synth flags ...: the file's top-8 on both windows, then the file removed
  local n=$1; shift
  python3 scripts/gpu_synth_qwen35.py "$VOCAB" "$T/$n.gguf" --outtype q4_k_m "$@" 2>/dev/null
  for w in a b; do "$TOPK" score "$T/$n.gguf" 8 "$T/$w.txt" > "$T/$n-$w.txt" 2>/dev/null; done
  rm -f "$T/$n.gguf"
}
row() {  # label, synth flags ...
  local label=$1; shift
  score plain "$@" && score nudged "$@" --perturb 0.002
  python3 - "$T" "$label" <<'PY'
import re, sys
import numpy as np
from evalbot.engine.scoring.correctness_stats import kl_arrays
t, label = sys.argv[1], sys.argv[2]
def top(name):
    rows = [[(int(i), float(lp)) for i, lp in (e.split(":") for e in re.search(r"top=(\S+)", line)[1].split(","))]
            for line in open(f"{t}/{name}.txt") if line.startswith("S ")]
    return np.array([[i for i, _ in r] for r in rows]), np.array([[lp for _, lp in r] for r in rows])
(a, al), (b, bl) = top("plain-a"), top("nudged-a")
(c, cl) = top("plain-b")
print(f"{label:48s} rounding: top-1 {np.mean(a[:, 0] == b[:, 0]):.3f} KL {kl_arrays(a, al, b, bl).mean():.5f}"
      f" | context: top-1 kept {np.mean(a[64:, 0] == c[64:, 0]):.3f}"
      f" | top log-prob {al[:, 0].mean():.2f}, top-2 gap {np.mean(al[:, 0] - al[:, 1]):.3f}")
PY
}
row "shared/synth_qwen35.py's values (every sd 0.02)"
row "--embd-scale 1 --branch-scale 0.001 --output-norm 3" --embd-scale 1 --branch-scale 0.001 --output-norm 3
