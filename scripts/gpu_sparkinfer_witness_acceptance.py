"""Issue 30's GPU acceptance (scripts/gpu_sparkinfer_witness_acceptance.sh): its heads, its e2e
profile, and the summary of what each evaluation got against what it must get.

    python3 scripts/gpu_sparkinfer_witness_acceptance.py heads REPO
        commits the acceptance's heads as branches of REPO (sparkinfer ba8add3 with the phase-2
        branches main, aa, slow, broken of scripts/gpu_sparkinfer.sh setup); each is a small
        source edit, checked against the text it replaces
    python3 scripts/gpu_sparkinfer_witness_acceptance.py profile SHIPPED MODELS.sha256 KEY
            [--no-correctness] [--qwen36] [--no-128k] [--stable] [NAME=VALUE ...] > P.yaml
        the shipped profile with only the model files and pins changed (the synthetic Qwythos;
        the 4-layer qwen35moe file with --qwen36, else the second model's run and guard are
        removed), the reference built from the tarball (KEY), correctness floors calibrated from
        main on these random-weight models (phase 2's A/A), and the box's env; the 128k run kept.
        --no-correctness drops the correctness section (evaluations other than the A/A and one
        honest one, to save GPU time); --stable keeps the shipped floors (none: the policy's),
        for the Qwythos file of SPK_STABLE=1 that main and the reference agree on
    python3 scripts/gpu_sparkinfer_witness_acceptance.py summary DIR
        per evaluation under DIR (eval-NAME/results.json, eval-NAME.verdict.json): the verdict
        against the expected one, the witnesses' pairs and box time, and each stage's box time;
        the honest evaluations' measuring + witness box time against 1.5x the A/A's measuring
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from gpu_sparkinfer_profile import calibrated_floors  # noqa: E402

from evalbot.grading.box_time import box_time  # noqa: E402
from evalbot.report.publication import PRIVATE  # noqa: E402

QWEN35 = "runtime/src/models/qwen35.cpp"
PREFILL = "runtime/src/models/qwen35_prefill.cpp"
BENCH = "runtime/examples/qwen3_gguf_bench.cpp"
LM_HEAD = "    if (s.gguf && s.use_pq && s.use_llama && s.w.lm_head_type == 12) {\n"
LM_HEAD_END = "    else        kernels::launch_linear_f32(s.xn, s.w.lm_head, s.logits, 1, c.vocab, H, st);\n"
ATTN = "            kernels::launch_prefill_attn_int8_paged(qb, kpool, vpool, kscale, vscale, btable, att,\n"
V_PROJ = "            proj(xn, w.wv, w.wv_type, vf, kvdim, H);\n"
V_X1024 = ("            for (int evalbot_x2 = 0; evalbot_x2 < ({cond} ? 10 : 0); evalbot_x2++)\n"
          "                kernels::launch_prefill_add(vf, vf, vf, (long)N * kvdim, st);\n")
JSON_ROW = "               rows[i].ctx, rows[i].decode_tps, rows[i].prefill_pp);"


def printed(field: str, factor: str) -> list[tuple[str, str, str]]:
    """The bench's SWEEP_JSON line with one field multiplied: nothing else faster."""
    return [(BENCH, JSON_ROW, JSON_ROW.replace(f"rows[i].{field}", f"rows[i].{field} * {factor}"))]


def lm_head_twice(condition: str) -> list[tuple[str, str, str]]:
    """The decode graph's LM head (quantize + GEMV, idempotent) run twice when `condition` holds
    at capture: every decode step of the bench's device loop and of forward_token pays it."""
    return [(QWEN35, LM_HEAD, f"    for (int evalbot_rep = 0; evalbot_rep < (({condition}) ? 2 : 1); "
                              "evalbot_rep++) {\n" + LM_HEAD),
            (QWEN35, LM_HEAD_END, LM_HEAD_END + "    }\n")]


# branch -> (commit message, edits: (file, old text, new text)); each old text must occur once
HEADS: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "slow-decode": ("decode: the LM head twice per step (a slower decode path)", lm_head_twice("true")),
    "slow-deep-decode": ("decode: the LM head twice per step at depth >= 32768",
                         lm_head_twice("seqlen >= 32768")),
    "slow-attn-32k": ("prefill: the batched attention twice above 8192 tokens (same numbers)",
                      [(PREFILL, ATTN, "            for (int evalbot_rep = 0;"
                                       " evalbot_rep < (N > 8192 ? 2 : 1); evalbot_rep++)\n" + ATTN)]),
    "liar-decode-105": ("bench: decode printed x1.05",
                        printed("decode_tps", "1.05")),
    "liar-decode-110": ("bench: decode printed x1.10",
                        printed("decode_tps", "1.10")),
    "liar-prefill-110": ("bench: prefill printed x1.10",
                         printed("prefill_pp", "1.10")),
    # skipped work only the witness sees: the batched prefill runs the first half of a long prompt
    # (the bench's printed rate is true to the work it did; the score tool never calls it)
    "lazy-prefill": ("prefill: half of a long prompt (work skipped)",
                     [(PREFILL, "    const int N = n;\n",
                       "    const int N = n > 2048 ? n / 2 : n;  // skips the second half\n")]),
    # numerics only the batched prefill runs (issue 32): the KV cache it leaves is wrong,
    # forward_token is untouched. Changes that only shrink what the fill leaves (rms eps x 1e5,
    # then x 1e16: tests/data/sparkinfer/accept-h200/ and accept-h100/) moved the random-weight
    # Qwythos by under half a point of top-1: its positions barely use their context, and what a
    # near-uniform attention averages from a random V is near zero anyway. These heads write
    # the full-attention layers' V to the cache 1024 times too large (ten in-place doublings,
    # the kind of damage a wrong int8 scale does), so the positions after the fill, 32k deep
    # too, read an attention output that outweighs a 1/sqrt(32768) average.
    "broken-prefill": ("prefill: V written to the cache x1024 in the batched prefill",
                       [(PREFILL, V_PROJ, V_PROJ + V_X1024.format(cond="true"))]),
    # the same, only for prompts longer than 32,000 ids: damage the deep windows alone can see
    # (on the random-weight model main matches the reference's top-1 at under 1% of the deep
    # positions, so no deep damage can fall the 1-point margin below it: ACCEPT_STABLE=1)
    "broken-long-prefill": ("prefill: V written to the cache x1024 in batched prefills over 32000 ids",
                            [(PREFILL, V_PROJ, V_PROJ + V_X1024.format(cond="N > 32000"))]),
}

# name, base branch, head branch, what it must get, correctness section on
EVALUATIONS = [
    ("aa", "main", "aa", "eval:none", True),
    ("decode-a", "slow-decode", "main", "tier", True),
    ("decode-b", "slow-decode", "main", "tier", False),
    ("deep-decode", "slow-deep-decode", "main", "tier", False),
    ("prefill-4k", "slow", "main", "tier", False),
    ("prefill-32k", "slow-attn-32k", "main", "tier", False),
    ("liar-decode-105", "main", "liar-decode-105", "no tier", False),
    ("liar-decode-110", "main", "liar-decode-110", "no tier", False),
    ("liar-prefill-110", "main", "liar-prefill-110", "no tier", False),
    ("lazy-prefill", "main", "lazy-prefill", "no tier", False),
    ("broken-prefill", "main", "broken-prefill", "eval:REJECT", True),
    ("broken-long-prefill", "main", "broken-long-prefill", "eval:REJECT", True),
]
TIERS = {"eval:XL", "eval:L", "eval:M", "eval:S", "eval:XS"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=evalbot-e2e", "-c", "user.email=e2e@localhost",
                           *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def heads(repo: Path) -> None:
    for branch, (message, edits) in HEADS.items():
        git(repo, "checkout", "-q", "-B", branch, "main")
        for rel, old, new in edits:
            text = (repo / rel).read_text()
            if text.count(old) != 1:
                raise SystemExit(f"{branch}: {rel} has {text.count(old)} copies of {old!r}")
            (repo / rel).write_text(text.replace(old, new))
        git(repo, "commit", "-qam", message)
        print(f"{branch.upper().replace('-', '_')}={git(repo, 'rev-parse', 'HEAD')}")
    git(repo, "checkout", "-q", "main")


def profile(shipped: Path, sums: Path, key: str, flags: list[str]) -> dict:
    doc = yaml.safe_load(shipped.read_text())
    digests = {name: digest for digest, name in (line.split() for line in sums.read_text().splitlines()
                                                 if line.strip())}
    qwen36 = "--qwen36" in flags
    files = {"qwythos-9b": "qwythos-synth.gguf", "qwen3.6-35b-a3b": "qwen36-synth-4l.gguf"}
    doc["name"] = "sparkinfer-witness-e2e"
    doc["env"].update(dict(f.split("=", 1) for f in flags if "=" in f))
    doc["models"] = [m for m in doc["models"] if qwen36 or m["name"] == "qwythos-9b"]
    for m in doc["models"]:
        m["file"], m["sha256"] = files[m["name"]], digests[files[m["name"]]]
    names = {m["name"] for m in doc["models"]}
    doc["speed"]["runs"] = [r for r in doc["speed"]["runs"] if r["model"] in names and not (
        "--no-128k" in flags and any(c["ctx"] == 131072 for c in r["cells"]))]
    corr = doc.get("correctness")
    if "--no-correctness" in flags or corr is None:
        doc.pop("correctness", None)
        return doc
    corr["guards"] = [g for g in corr.get("guards", []) if g in names]
    if not corr["guards"]:
        corr.pop("guards")
    for argv in ("reference_argv", "tokenize_argv"):
        corr[argv] = [key if a.startswith("git-") else a for a in corr[argv]]
    if "--stable" in flags:  # a model main and the reference agree on: the shipped floors
        corr.pop("floors", None)
    else:  # the random-weight file: main's own level against the reference, calibrated
        corr["floors"] = calibrated_floors()
    return doc


def summary(folder: Path) -> int:
    rows, aa_measuring, bad = [], None, 0
    for name, _, _, expected, _ in EVALUATIONS:
        # the raw results the out folder keeps private (the published copy has no samples)
        res, ver = raw_results(folder / f"eval-{name}"), folder / f"eval-{name}.verdict.json"
        if not res.is_file() or not ver.is_file():
            rows.append(f"{name:18s} not run")
            continue
        results, verdict = json.loads(res.read_text()), json.loads(ver.read_text())
        headline, t = verdict.get("headline"), box_time(results)
        measuring, witnesses = t.stages["measuring"] or 0.0, t.stages["witnesses"] or 0.0
        got = "tier" if headline in TIERS else headline if expected.startswith("eval:") else "no tier"
        ok = got == expected and headline != "eval:infra-error"
        bad += not ok
        if name == "aa":
            aa_measuring = measuring
        cells = ", ".join(f"{c['key'].split('/')[-1]} {c['decision']}"
                          + (f" ({c.get('confirmation')})" if c.get("confirmation") else "")
                          for c in verdict.get("cells") or [] if c["decision"] not in ("neutral",))
        wit = "; ".join(f"{w['name']}: {len({s['pair'] for s in w['samples']})} pairs, "
                        f"{sum(float(s.get('wall_s') or 0) for s in w['samples']):.0f} s, "
                        f"stopped {w.get('stopped') or '-'}"
                        for w in results.get("witnesses") or [] if w.get("source") == "witness")
        rows.append(f"{name:18s} {'OK ' if ok else 'BAD'} {headline} (want {expected}) | "
                    + " ".join(f"{k} {'-' if v is None else f'{v:.0f}s'}"
                               for k, v in {"total": t.total_s, **t.stages}.items())
                    + f" | {cells} | {wit}")
        if (results.get("correctness") or {}).get("chunks"):
            rows.append(f"{'':18s} {agreement(results['correctness'], verdict)}")
        if expected == "tier" and aa_measuring:
            ratio = (measuring + witnesses) / aa_measuring
            rows.append(f"{'':18s} measuring + witnesses = {ratio:.2f} x the A/A's measuring "
                        f"({'OK' if ratio <= 1.5 else 'over 1.5'})")
    print("\n".join(rows))
    return 1 if bad else 0


def raw_results(out: Path) -> Path:
    """The evaluation's raw results: out/private/results.json (docs/trust.md), or, from a
    harness before the publication rule, out/results.json."""
    private = out / PRIVATE / "results.json"
    return private if private.is_file() else out / "results.json"


def agreement(corr: dict, verdict: dict) -> str:
    """Each side's top-1 agreement with the reference, short and deep positions apart: where
    main sits against the policy's floor tells whether the model can judge a head at all."""
    parts = []
    for kind in ("short", "deep"):
        rows = [c for c in corr["chunks"] if c["kind"] == kind]
        n = sum(c["positions"] for c in rows)
        if n:
            parts.append(f"{kind} {n} positions: main {sum(c['base_top1'] for c in rows) / n:.1%}, "
                         f"PR {sum(c['head_top1'] for c in rows) / n:.1%}")
    decision = (verdict.get("correctness") or {}).get("decision")
    seconds = corr.get("seconds") or {}
    came = "; ".join(f"{who} {got.get('cached', 0)} cached, {got.get('scored', 0)} scored"
                     for who, got in (("reference", corr.get("reference") or {}),
                                      ("main", corr.get("main_scores") or {})))
    return (f"top-1 against the reference: {'; '.join(parts)} (correctness {decision})\n"
            f"{'':18s} windows: {came}; seconds: "
            + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()))


def main() -> int:
    cmd, *args = sys.argv[1:] or ["help"]
    if cmd == "heads":
        heads(Path(args[0]))
        return 0
    if cmd == "profile":
        shipped, sums, key, *flags = args
        sys.stdout.write(yaml.safe_dump(profile(Path(shipped), Path(sums), key, flags), sort_keys=False))
        return 0
    if cmd == "summary":
        return summary(Path(args[0]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
