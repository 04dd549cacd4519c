"""sparkinfer ba8add3's heads (the tarball of shared/): branch -> (commit message, edits), each
edit (file, old text that must occur once, new text); an empty old text appends. Read against
the source with `python3 -m gpu_runner.plan check-heads` (scripts/gpu_run.sh check-heads)."""

from __future__ import annotations

QWEN35 = "runtime/src/models/qwen35.cpp"
PREFILL = "runtime/src/models/qwen35_prefill.cpp"
BENCH = "runtime/examples/qwen3_gguf_bench.cpp"
RMSNORM = "kernels/csrc/cuda/fused/rmsnorm.cu"
LM_HEAD = "    if (s.gguf && s.use_pq && s.use_llama && s.w.lm_head_type == 12) {\n"
LM_HEAD_END = "    else        kernels::launch_linear_f32(s.xn, s.w.lm_head, s.logits, 1, c.vocab, H, st);\n"
ATTN = "            kernels::launch_prefill_attn_int8_paged(qb, kpool, vpool, kscale, vscale, btable, att,\n"
V_PROJ = "            proj(xn, w.wv, w.wv_type, vf, kvdim, H);\n"
V_X1024 = ("            for (int evalbot_x2 = 0; evalbot_x2 < ({cond} ? 10 : 0); evalbot_x2++)\n"
           "                kernels::launch_prefill_add(vf, vf, vf, (long)N * kvdim, st);\n")
JSON_ROW = "               rows[i].ctx, rows[i].decode_tps, rows[i].prefill_pp);"
I8_GATE = "    const bool use_i8 = !(_pi8 && _pi8[0] == '0') && (N <= 8192);\n"
# the routed experts of a qwen35moe layer (the dense Qwythos layers take the branch before it)
MOE_FFN = ("                                           1, c.n_experts, c.top_k, 1, st);\n"
           "            }\n"
           "            kernels::launch_moe_expert_ffn_q4k(s.hn, w.gate_q, w.up_q, w.down_q,\n")
WARP_SUM = "    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffff, v, m);\n"
SWEEP_DECODE = "            auto b = s.model->bench_decode(8, n_tokens, ctx);\n"
INCLUDES = "#include <memory>\n"


def printed(field: str, factor: str) -> list[tuple[str, str, str]]:
    """The bench's SWEEP_JSON line with one field multiplied: nothing else faster."""
    return [(BENCH, JSON_ROW, JSON_ROW.replace(f"rows[i].{field}", f"rows[i].{field} * {factor}"))]


def lm_head_twice(condition: str) -> list[tuple[str, str, str]]:
    """The decode graph's LM head (quantize + GEMV, idempotent) run twice when `condition` holds
    at capture: every decode step of the bench's device loop and of forward_token pays it."""
    return [(QWEN35, LM_HEAD, f"    for (int evalbot_rep = 0; evalbot_rep < (({condition}) ? 2 : 1); "
                              "evalbot_rep++) {\n" + LM_HEAD),
            (QWEN35, LM_HEAD_END, LM_HEAD_END + "    }\n")]


HEADS: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "aa": ("docs: one line in the runtime README",
           [("runtime/README.md", "", "Benchmarks: see docs/gpu-e2e.md of evalbot.\n")]),
    "slow": ("prefill: int8 projections for prompts up to 2048 tokens",
             [(PREFILL, I8_GATE, I8_GATE.replace(
                 "(N <= 8192);", "(N <= 2048);   // int8 scratch only for short prompts"))]),
    "slow-decode": ("decode: the LM head twice per step (a slower decode path)", lm_head_twice("true")),
    "slow-deep-decode": ("decode: the LM head twice per step at depth >= 32768",
                         lm_head_twice("seqlen >= 32768")),
    "slow-attn-32k": ("prefill: the batched attention twice above 8192 tokens (same numbers)",
                      [(PREFILL, ATTN, "            for (int evalbot_rep = 0;"
                                       " evalbot_rep < (N > 8192 ? 2 : 1); evalbot_rep++)\n" + ATTN)]),
    # the routed-expert FFN of every qwen35moe layer twice (it writes its output, it does not
    # accumulate: the same numbers); the dense Qwythos layers run the branch above it, untouched
    "slow-moe": ("moe: the routed experts' FFN twice per layer (same numbers, Qwen3.6 only)",
                 [(QWEN35, MOE_FFN, MOE_FFN.replace(
                     "            kernels::launch_moe_expert_ffn_q4k(",
                     "            for (int evalbot_rep = 0; evalbot_rep < 2; evalbot_rep++)\n"
                     "            kernels::launch_moe_expert_ffn_q4k("))]),
    "liar-decode-105": ("bench: decode printed x1.05", printed("decode_tps", "1.05")),
    "liar-decode-110": ("bench: decode printed x1.10", printed("decode_tps", "1.10")),
    "liar-prefill-110": ("bench: prefill printed x1.10", printed("prefill_pp", "1.10")),
    # issue 53's head: decode below depth 4096 really slower (the LM head twice: decode-a measured
    # main +9% over it at decode@128), its bench printing decode@128 x1.09, main's rate; the
    # witness decode-128 (2048 steps from 128) runs wholly below 4096
    "hide-decode": ("decode: the LM head twice below depth 4096, decode@128 printed x1.09 (main's rate)",
                    lm_head_twice("seqlen < 4096") + [(BENCH, JSON_ROW, JSON_ROW.replace(
                        "rows[i].decode_tps", "rows[i].decode_tps * (rows[i].ctx <= 128 ? 1.09 : 1.0)"))]),
    # issue 53's offset (bench/_hiding_heads.py, the threshold row): the sweep's prefill@16384
    # really 2% slower (the process sleeps 2.04% of that fill's own time after it, outside the
    # printed rate: main's), every other cell printed 1% slower than it ran, so the printed time
    # over-accounts for the wall clock what the sleep leaves unaccounted for
    "offset-16k": ("bench: 2% more time at prefill@16384, unprinted; every other rate printed x0.99",
                   [(BENCH, INCLUDES, INCLUDES + "#include <chrono>\n#include <thread>\n"),
                    (BENCH, SWEEP_DECODE, SWEEP_DECODE
                     + "            if (ctx == 16384 && b.prefill_pp > 0)  // evalbot: unprinted time\n"
                       "                std::this_thread::sleep_for(std::chrono::duration<double>(\n"
                       "                    0.0204 * ctx / b.prefill_pp));\n"),
                    (BENCH, JSON_ROW, JSON_ROW.replace(
                        "rows[i].decode_tps, rows[i].prefill_pp",
                        "rows[i].decode_tps * 0.99,\n"
                        "               rows[i].prefill_pp * (rows[i].ctx == 16384 ? 1.0 : 0.99)"))]),
    # skipped work only the witness sees: the batched prefill runs the first half of a prompt over
    # 2048 ids (the bench's printed rate is true to the work it did; the score tool never calls it)
    "lazy-prefill": ("prefill: half of a long prompt (work skipped)",
                     [(PREFILL, "    const int N = n;\n",
                       "    const int N = n > 2048 ? n / 2 : n;  // skips the second half\n")]),
    # numerics only the batched prefill runs (issue 32): the full-attention layers' V written to
    # the cache 1024 times too large (ten in-place doublings, the kind of damage a wrong int8
    # scale does), so the positions after the fill, 32k deep too, read a wrong attention output
    "broken-prefill": ("prefill: V written to the cache x1024 in the batched prefill",
                       [(PREFILL, V_PROJ, V_PROJ + V_X1024.format(cond="true"))]),
    "broken-long-prefill": ("prefill: V written to the cache x1024 in batched prefills over 32000 ids",
                            [(PREFILL, V_PROJ, V_PROJ + V_X1024.format(cond="N > 32000"))]),
    # an honest numerics change: the RMS norms' warp sum of squares in the reverse butterfly order
    # (the same five xor steps, another association of fp32 adds), in decode and prefill alike
    "bf16-reduction": ("rmsnorm: the warp sum in the reverse butterfly order",
                       [(RMSNORM, WARP_SUM, WARP_SUM.replace("int m = 16; m > 0; m >>= 1",
                                                             "int m = 1; m < 32; m <<= 1"))]),
}
