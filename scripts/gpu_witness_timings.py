"""The llamacpp witness on the GPU box, timed by the harness's own handoff clock (docs/gpu-e2e.md,
"the witness's step time and floor").

Three parts, each written to OUT as it goes:

1. variants.tsv: the shipped witness (`evalbot-topk witness MODEL 4096 896`: the prompt at the
   handoff, then 896 ids one at a time, each after the previous answer) of builds that differ in
   one context
   setting (BINS: name=path ...), 3 fresh prompts each, with the ids' digest (a variant that
   changes the ids is not the same witness);
2. bench-tg.json: llama-bench's own decode rate at the same depth (`-p 0 -n 896 -d 4096`);
3. aa.tsv: A/A pairs of one build (--aa) and of the fastest variant with its ids, in turn, each
   alternating ABBA, until the budget: the per-pair sd of the handoff seconds is the witness's
   floor (`sd_floor_s`, its df the pairs less one).

Usage: python3 scripts/gpu_witness_timings.py --model M --bench LLAMA_BENCH --out DIR
       --aa NAME --budget-s S NAME=BIN ...
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evalbot.engine.measure import witness  # noqa: E402
from evalbot.engine.sandbox import proc  # noqa: E402
from evalbot.evaluation.profile import load_profile  # noqa: E402

SPEC = next(w for r in load_profile("llamacpp").runs for w in r.witnesses)
PREFILL, TOTAL = SPEC.prompt_tokens, SPEC.prompt_tokens + SPEC.steps


def prompt(rng: random.Random) -> list[int]:
    return [rng.randrange(1000, 150000) for _ in range(TOTAL)]


def timed(binary: str, model: str, ids: list[int], log: Path) -> tuple[float, float, str]:
    """(handoff seconds, wall seconds, digest of the output ids) of one witness process, run as
    the harness runs the shipped profile's witness."""
    argv = [binary, *[a.format(model=model) for a in SPEC.argv[1:]]]
    done = proc.run(argv, cwd=log.parent, timeout_s=120, log=log, trusted=True,
                    handoff=witness.handoff_of(SPEC, ids))
    got = witness.read_output_ids(done.output, SPEC.output) if done.ok else None
    digest = hashlib.sha256(repr(got).encode()).hexdigest()[:12] if got else f"rc{done.returncode}"
    return done.handoff_s or -1.0, done.wall_s, digest


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--aa", required=True)
    ap.add_argument("--budget-s", type=float, default=400)
    ap.add_argument("bins", nargs="+")
    a = ap.parse_args()
    start = time.monotonic()
    bins = dict(b.split("=", 1) for b in a.bins)
    a.out.mkdir(parents=True, exist_ok=True)
    seen: dict[str, list[tuple[float, str]]] = {}
    with open(a.out / "variants.tsv", "w") as out:
        out.write("variant\tprompt\thandoff_s\twall_s\tids\n")
        for name, binary in bins.items():
            for seed in range(3):
                h, w, d = timed(binary, a.model, prompt(random.Random(seed)), a.out / "w.log")
                seen.setdefault(name, []).append((h, d))
                out.write(f"{name}\t{seed}\t{h:.4f}\t{w:.4f}\t{d}\n")
                out.flush()
    # the A/A times --aa and the fastest variant whose ids are --aa's (the same witness)
    same = [n for n, r in seen.items() if [d for _, d in r] == [d for _, d in seen[a.aa]]]
    fastest = min(same, key=lambda n: sum(h for h, _ in seen[n]))
    aa = [a.aa] + ([fastest] if fastest != a.aa else [])
    bench = subprocess.run([a.bench, "-m", a.model, "-p", "0", "-n", "896", "-d", str(PREFILL),
                            "-r", "2", "-fa", "0", "-ngl", "99", "-o", "json"],
                           capture_output=True, text=True, timeout=300)
    (a.out / "bench-tg.json").write_text(bench.stdout + bench.stderr[-2000:])
    rng = random.Random(1234)
    with open(a.out / "aa.tsv", "w") as out:
        out.write("variant\tpair\tside\thandoff_s\twall_s\tids\n")
        pair = 0
        while time.monotonic() - start < a.budget_s - 20:
            ids = prompt(rng)  # one prompt for both processes of a pair, as the harness does
            name = aa[pair % len(aa)]
            for side in ("a", "b") if pair // len(aa) % 2 == 0 else ("b", "a"):
                h, w, d = timed(bins[name], a.model, ids, a.out / "w.log")
                out.write(f"{name}\t{pair}\t{side}\t{h:.4f}\t{w:.4f}\t{d}\n")
                out.flush()
            pair += 1
    print(json.dumps({"aa_pairs": pair, "s": round(time.monotonic() - start)}))


if __name__ == "__main__":
    main()
