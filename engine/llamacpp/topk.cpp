// evalbot-topk: teacher-forced top-k log-probabilities and tokenization through libllama.
//
// Built by engine/llamacpp/build.py against the tree under test (its own libllama), so the
// engine side scores exactly the code of the side being evaluated; the reference build runs the
// same source against the pinned llama.cpp.
//
//   evalbot-topk score MODEL TOPK WINDOWS.txt   one window per line, token ids separated by spaces,
//                                               optionally led by `@F ` (score positions F.. only)
//   evalbot-topk tokenize MODEL TEXT.txt        prints the token ids of the whole file, one line
//   evalbot-topk decode MODEL N_PREFILL IDS.txt  a witness (engine/measure/witness.py): prefills the first
//       N_PREFILL ids in one batch, then decodes the rest one token per step (teacher-forced) and
//       prints `OUTPUT_IDS: <argmax after each decode step> ...`, one line
//   evalbot-topk decode MODEL N_PREFILL - N_TOTAL   the same witness on the handoff clock: loads
//       the model, makes a context for N_TOTAL ids and warms it (one prefill and one step of
//       throw-away ids, then the cache cleared), prints `EVALBOT_READY`, and only then reads its
//       N_TOTAL ids as one line from stdin (the harness times from writing them to reading the
//       OUTPUT_IDS line: the model load is not in the time)
//
// score prints, per window, `W <n tokens>` (`W <n tokens> <F>` when led by @F), then one line per
// scored position in the format of sparkinfer's qwen3_gguf_score (so one parser reads both), then
// `END`:
//   S i=<pos> tgt=<next id> am=<argmax id> lp=<logprob of target> top=<id>:<lp>,<id>:<lp>,...
// Logits are computed only for the scored positions: a 32k-token window scored at its last 256
// positions needs 256 rows of logits, not 32k (20 GB for a 151k vocabulary).
// Log-probabilities are relative to the full softmax over the vocabulary, computed in double.
#include "llama.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

static void quiet(ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static llama_model * load(const char * path) {
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 999;  // everything on the GPU when there is one; ignored on a CPU build
    llama_model * model = llama_model_load_from_file(path, mp);
    if (!model) { fprintf(stderr, "[FAIL] load %s\n", path); exit(2); }
    return model;
}

struct Window {
    size_t from = 0;  // first scored position
    std::vector<llama_token> tokens;
};

static std::vector<Window> read_windows(const char * path) {
    std::ifstream in(path);
    if (!in) { fprintf(stderr, "[FAIL] cannot read %s\n", path); exit(2); }
    std::vector<Window> out;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ids(line);
        Window w;
        if (ids.peek() == '@') {
            ids.get();
            long from;
            if (!(ids >> from) || from < 0) { fprintf(stderr, "[FAIL] bad @from\n"); exit(2); }
            w.from = (size_t) from;
        }
        long id;
        while (ids >> id) w.tokens.push_back((llama_token) id);
        if (w.tokens.empty()) continue;
        if (w.tokens.size() < 2 || w.from + 1 >= w.tokens.size()) {
            fprintf(stderr, "[FAIL] window of %zu tokens scored from %zu\n", w.tokens.size(), w.from);
            exit(2);
        }
        out.push_back(w);
    }
    return out;
}

static void print_position(const float * logits, int n_vocab, int pos, llama_token target, int topk) {
    double mx = *std::max_element(logits, logits + n_vocab);
    double sum = 0.0;
    for (int v = 0; v < n_vocab; v++) sum += std::exp((double) logits[v] - mx);
    const double lse = mx + std::log(sum);
    std::vector<int> idx(n_vocab);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + topk, idx.end(), [&](int a, int b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    printf("S i=%d tgt=%d am=%d lp=%.6f top=", pos, target, idx[0], logits[target] - lse);
    for (int k = 0; k < topk; k++) printf("%s%d:%.6f", k ? "," : "", idx[k], logits[idx[k]] - lse);
    printf("\n");
}

static int score(const char * model_path, int topk, const char * windows_path) {
    auto windows = read_windows(windows_path);
    size_t longest = 0;
    for (auto & w : windows) longest = std::max(longest, w.tokens.size());
    llama_model * model = load(model_path);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    if (topk < 1 || topk > n_vocab) { fprintf(stderr, "[FAIL] topk %d\n", topk); return 2; }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) std::max<size_t>(longest, 16);
    cp.n_batch = cp.n_ctx;
    cp.n_ubatch = std::min<uint32_t>(cp.n_ctx, 512);
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "[FAIL] context\n"); return 2; }
    for (auto & win : windows) {
        const auto & w = win.tokens;
        for (llama_token t : w) {
            if (t < 0 || t >= n_vocab) { fprintf(stderr, "[FAIL] token %d out of vocab\n", t); return 2; }
        }
        llama_memory_clear(llama_get_memory(ctx), true);
        llama_batch batch = llama_batch_init((int32_t) w.size(), 0, 1);
        for (size_t i = 0; i < w.size(); i++) {
            batch.token[i] = w[i];
            batch.pos[i] = (llama_pos) i;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = 0;
            batch.logits[i] = i >= win.from && i + 1 < w.size();
        }
        batch.n_tokens = (int32_t) w.size();
        if (llama_decode(ctx, batch) != 0) { fprintf(stderr, "[FAIL] decode\n"); return 3; }
        if (win.from) printf("W %zu %zu\n", w.size(), win.from);
        else printf("W %zu\n", w.size());
        for (size_t i = win.from; i + 1 < w.size(); i++) {
            print_position(llama_get_logits_ith(ctx, (int32_t) i), n_vocab, (int) i, w[i + 1], topk);
        }
        printf("END\n");
        llama_batch_free(batch);
    }
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

static int tokenize(const char * model_path, const char * text_path) {
    std::ifstream in(text_path, std::ios::binary);
    if (!in) { fprintf(stderr, "[FAIL] cannot read %s\n", text_path); return 2; }
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(model_path, mp);
    if (!model) { fprintf(stderr, "[FAIL] load %s\n", model_path); return 2; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::vector<llama_token> ids(text.size() + 16);
    int n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), ids.data(), (int32_t) ids.size(), false, false);
    if (n < 0) { fprintf(stderr, "[FAIL] tokenize\n"); return 3; }
    for (int i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
    printf("\n");
    llama_model_free(model);
    return 0;
}

static std::vector<llama_token> read_stdin_ids(size_t n_total) {
    std::string line;
    std::vector<llama_token> ids;
    if (!std::getline(std::cin, line)) return ids;
    std::istringstream in(line);
    long id;
    while (in >> id) ids.push_back((llama_token) id);
    if (ids.size() != n_total) ids.clear();
    return ids;
}

// Prefill the first n_prefill ids in one batch, then decode the rest one step each, printing the
// argmax after every step.
static int run_decode(llama_context * ctx, int n_vocab, std::vector<llama_token> & ids, int n_prefill) {
    for (llama_token t : ids) {
        if (t < 0 || t >= n_vocab) { fprintf(stderr, "[FAIL] token %d out of vocab\n", t); return 2; }
    }
    if (llama_decode(ctx, llama_batch_get_one(ids.data(), n_prefill)) != 0) {
        fprintf(stderr, "[FAIL] prefill\n");
        return 3;
    }
    std::vector<llama_token> out;
    for (size_t i = (size_t) n_prefill; i < ids.size(); i++) {
        if (llama_decode(ctx, llama_batch_get_one(&ids[i], 1)) != 0) {
            fprintf(stderr, "[FAIL] decode step %zu\n", i);
            return 3;
        }
        const float * logits = llama_get_logits_ith(ctx, -1);
        out.push_back((llama_token) (std::max_element(logits, logits + n_vocab) - logits));
    }
    printf("OUTPUT_IDS:");
    for (llama_token t : out) printf(" %d", t);
    printf("\n");
    fflush(stdout);
    return 0;
}

static int decode(const char * model_path, int n_prefill, const char * ids_path, long n_total) {
    const bool handoff = std::string(ids_path) == "-";
    std::vector<llama_token> ids;
    if (!handoff) {
        auto windows = read_windows(ids_path);
        if (windows.size() == 1) ids = windows[0].tokens;
        n_total = (long) ids.size();
    }
    if (n_prefill < 1 || n_total <= n_prefill || (!handoff && ids.empty())) {
        fprintf(stderr, "[FAIL] one line of ids, longer than N_PREFILL >= 1\n");
        return 2;
    }
    llama_model * model = load(model_path);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) n_total + 16;
    cp.n_batch = (uint32_t) n_prefill;  // the prefill is one llama_decode call
    cp.n_ubatch = std::min<uint32_t>(cp.n_batch, 512);
    // as the profile's llama-bench (-fa 0): with the CUDA FA kernels left out of the build, "auto"
    // picked a fallback whose decode steps took twice as long on the H200 (4.4 s for the handoff's
    // work against 2.1 s, the same ids; docs/gpu-e2e.md)
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "[FAIL] context\n"); return 2; }
    int rc = 0;
    if (handoff) {
        std::vector<llama_token> warm((size_t) n_prefill + 1, 0);  // kernels, graphs, buffers
        if (llama_decode(ctx, llama_batch_get_one(warm.data(), n_prefill)) != 0 ||
            llama_decode(ctx, llama_batch_get_one(&warm[n_prefill], 1)) != 0) {
            fprintf(stderr, "[FAIL] warm-up\n");
            rc = 3;
        }
        llama_memory_clear(llama_get_memory(ctx), true);
        printf("EVALBOT_READY\n");
        fflush(stdout);
        ids = read_stdin_ids((size_t) n_total);
        if (rc == 0 && ids.empty()) {
            fprintf(stderr, "[FAIL] expected one line of %ld ids on stdin\n", n_total);
            rc = 2;
        }
    }
    if (rc == 0) rc = run_decode(ctx, n_vocab, ids, n_prefill);
    llama_free(ctx);
    llama_model_free(model);
    return rc;
}

int main(int argc, char ** argv) {
    std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "score" && argc == 5) {
        llama_log_set(quiet, nullptr);
        llama_backend_init();
        int rc = score(argv[2], atoi(argv[3]), argv[4]);
        llama_backend_free();
        return rc;
    }
    if (cmd == "decode" && (argc == 5 || (argc == 6 && std::string(argv[4]) == "-"))) {
        llama_log_set(quiet, nullptr);
        llama_backend_init();
        int rc = decode(argv[2], atoi(argv[3]), argv[4], argc == 6 ? atol(argv[5]) : 0);
        llama_backend_free();
        return rc;
    }
    if (cmd == "tokenize" && argc == 4) {
        llama_log_set(quiet, nullptr);
        return tokenize(argv[2], argv[3]);
    }
    fprintf(stderr, "usage: evalbot-topk score MODEL TOPK WINDOWS.txt | tokenize MODEL TEXT.txt"
                    " | decode MODEL N_PREFILL IDS.txt | decode MODEL N_PREFILL - N_TOTAL\n");
    return 64;
}
