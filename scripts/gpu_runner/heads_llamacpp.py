"""llama.cpp's heads (llama-cpp-python 0.3.36's vendor tree, shared/llama.cpp-pruned.tar.gz):
branch -> (commit message, edits), as heads_sparkinfer.py."""

from __future__ import annotations

CUDA = "ggml/src/ggml-cuda/ggml-cuda.cu"
QWEN3 = "src/models/qwen3.cpp"
CONTEXT = "src/llama-context.cpp"
COMPUTE = "    const auto status = graph_compute(res->get_gf(), ubatch.n_tokens > 1);\n"
LOGITS_ITH = "float * llama_context::get_logits_ith(int32_t i) {\n    output_reorder();\n"
LOGITS_ROW = ("        const int64_t j = output_resolve_row(i);\n"
              "        return logits.data + j*model.vocab.n_tokens();\n")
BENCH = "tools/llama-bench/llama-bench.cpp"
BENCH_TS = "                       [n_tokens](uint64_t t) { return 1e9 * n_tokens / t; });\n"
DECODE = ("int llama_context::decode(const llama_batch_ext & batch_inp) {\n"
          "    if (!memory) {\n")

# every batch of more than one id (a prompt's ubatches) computed twice: the cache rows it writes
# and the logits are the same numbers, single-id decode steps are untouched. The inputs are set
# again before the second pass: the first may reuse their memory for its intermediates (without
# it the CPU build's second pass aborted in set_rows on an index out of range, issue 53's rehearsal)
SLOW_PREFILL = (CONTEXT, COMPUTE, "    if (ubatch.n_tokens > 1) {\n"
                                  "        graph_compute(res->get_gf(), true);  // again\n"
                                  "        res->set_inputs(&ubatch);\n"
                                  "    }\n" + COMPUTE)

HEADS: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "aa": ("docs: one line in the README",
           [("README.md", "", "Benchmarks: see docs/gpu-e2e.md of evalbot.\n")]),
    # a real code change that slows decode: CUDA graphs never used (the base of the speedup)
    "slow": ("cuda: do not capture CUDA graphs",
             [(CUDA, "    bool use_cuda_graph = true;\n",
               "    bool use_cuda_graph = false; // graphs off: launch every kernel\n")]),
    "broken": ("qwen3: attention scale 1/d",
               [(QWEN3, "1.0f/sqrtf(float(n_embd_head))", "1.0f/float(n_embd_head)")]),
    "slow-prefill": ("context: compute each multi-id batch twice", [SLOW_PREFILL]),
    # issue 53's hider: slow-prefill's real slowdown (prefill@4096 about half as fast), and
    # llama-bench printing every prompt test's rates x2, so its cells read main's: only a witness
    # of the prefill's work (prefill-4096-at-4096) or the run's cost check can see it
    "hide-prefill": ("context: compute each multi-id batch twice; bench: prompt rates x2",
                     [SLOW_PREFILL,
                      (BENCH, BENCH_TS,
                       "                       [n_tokens, this](uint64_t t) {\n"
                       "                           return 1e9 * n_tokens / t * (n_prompt > 0 ? 2 : 1);\n"
                       "                       });\n")]),
    # damage tied to a window (its first id, read when a decode starts on an empty memory): in
    # one window in five, every 7th logits row of a batch with several outputs (a scored window,
    # not a decode step: the witness's ids stay main's, so correctness alone must see it) has its
    # top-1 removed (the second choice wins), on a copy, so a row read twice is the same row
    "window-damage": ("context: logits of some prompts lose their top-1",
                      [(CONTEXT, LOGITS_ITH,
                        "static bool evalbot_window_bad = false;  // the window's first id is 0 mod 5\n"
                        "static std::vector<float> evalbot_row;\n\n" + LOGITS_ITH),
                       (CONTEXT, LOGITS_ROW,
                        "        const int64_t j = output_resolve_row(i);\n"
                        "        float * row = logits.data + j*model.vocab.n_tokens();\n"
                        "        if (!evalbot_window_bad || n_outputs <= 1 || j % 7 != 0) {\n"
                        "            return row;\n"
                        "        }\n"
                        "        evalbot_row.assign(row, row + model.vocab.n_tokens());\n"
                        "        size_t top = 0;\n"
                        "        for (size_t k = 1; k < evalbot_row.size(); k++) {\n"
                        "            if (evalbot_row[k] > evalbot_row[top]) top = k;\n"
                        "        }\n"
                        "        evalbot_row[top] = -INFINITY;\n"
                        "        return evalbot_row.data();\n"),
                       (CONTEXT, DECODE,
                        "int llama_context::decode(const llama_batch_ext & batch_inp) {\n"
                        "    if (memory && !batch_inp.tokens.empty() && memory->seq_pos_max(0) < 0) {\n"
                        "        evalbot_window_bad = batch_inp.tokens[0].id % 5 == 0;\n"
                        "    }\n"
                        "    if (!memory) {\n")]),
}
