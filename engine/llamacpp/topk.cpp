// evalbot-topk: teacher-forced top-k log-probabilities and tokenization through libllama.
//
// Built by engine/llamacpp/build.py against the tree under test (its own libllama), so the
// engine side scores exactly the code of the side being evaluated; the reference build runs the
// same source against the pinned llama.cpp.
//
//   evalbot-topk score MODEL TOPK WINDOWS.txt   one window per line, token ids separated by spaces,
//                                               optionally led by `@F ` (score positions F.. only)
//   evalbot-topk tokenize MODEL TEXT.txt        prints the token ids of the whole file, one line
//   evalbot-topk decode MODEL N_PREFILL IDS.txt  prefills the first N_PREFILL ids in one batch,
//       then decodes the rest one token per step (teacher-forced) and prints
//       `OUTPUT_IDS: <argmax after each decode step> ...`, one line: the witness's work with every
//       id known up front, for scripts and for checking a witness's STEP ids offline
//   evalbot-topk witness MODEL N_PREFILL N_STEPS  the same work as a stepped witness on the handoff
//       clock (engine/measure/witness.py, engine/contract/witness_spec.py): loads the model, makes
//       a context for N_PREFILL + N_STEPS ids and warms it (one prefill and one step of throw-away
//       ids, then the memory cleared), prints `EVALBOT_READY`; then reads the prompt, N_PREFILL
//       ids as one line, runs it as one batch and prints `EVALBOT_STEP <argmax> <runner-up>
//       <margin>` (`print_step`); then N_STEPS times reads one line of one id, decodes it as one
//       step and prints the same.
//       Each id is written only after the previous STEP line was read, so no two steps can share
//       a forward pass. N_STEPS + 1 STEP lines in all; exits 0 at the EOF that follows. A
//       malformed line (a wrong count of ids, an id outside the vocabulary, EOF too early, input
//       after the last step) fails with `[FAIL] ...` on stderr.
//   evalbot-topk witness MODEL N_PREFILL N_STEPS N_FILL  the same at a depth: before READY the
//       context (N_FILL + N_PREFILL + N_STEPS ids) is filled with N_FILL fixed throw-away ids
//       (`fill_id`: the same ids on every side), then warmed at that depth (the warm-up's rows
//       removed again), so the timed prompt runs at positions N_FILL.. on top of an N_FILL-token
//       cache, as llama-bench's `-d N_FILL`: `witness MODEL 4096 1 4096` is prefill@4096's work
//       (pp4096 at depth 4096), `witness MODEL 1 255` decode@0's (tg256 from an empty cache: the
//       1-id prompt at position 0, then 255 steps). N_FILL 0 is the three-argument form.
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
#include <cerrno>
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

static llama_token argmax_last(llama_context * ctx, int n_vocab) {
    const float * logits = llama_get_logits_ith(ctx, -1);
    return (llama_token) (std::max_element(logits, logits + n_vocab) - logits);
}

static bool in_vocab(const std::vector<llama_token> & ids, int n_vocab) {
    for (llama_token t : ids) {
        if (t < 0 || t >= n_vocab) { fprintf(stderr, "[FAIL] token %d out of vocab\n", t); return false; }
    }
    return true;
}

// One context for both modes: the prefill is one llama_decode call of n_prefill ids (a fill
// goes in batches of n_prefill ids).
static llama_context * make_context(llama_model * model, size_t n_ids, int n_prefill) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) n_ids + 16;
    cp.n_batch = (uint32_t) n_prefill;
    cp.n_ubatch = std::min<uint32_t>(cp.n_batch, 512);
    // as the profile's llama-bench (-fa 0): with the CUDA FA kernels left out of the build, "auto"
    // picked a fallback whose decode steps took twice as long on the H200 (4.4 s for the handoff's
    // work against 2.1 s, the same ids; docs/gpu-e2e.md)
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) fprintf(stderr, "[FAIL] context\n");
    return ctx;
}

// Prefill the first n_prefill ids in one batch, then decode the rest one step each, printing the
// argmax after every step.
static int run_decode(llama_context * ctx, int n_vocab, std::vector<llama_token> & ids, int n_prefill) {
    if (!in_vocab(ids, n_vocab)) return 2;
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
        out.push_back(argmax_last(ctx, n_vocab));
    }
    printf("OUTPUT_IDS:");
    for (llama_token t : out) printf(" %d", t);
    printf("\n");
    fflush(stdout);
    return 0;
}

static int decode(const char * model_path, int n_prefill, const char * ids_path) {
    auto windows = read_windows(ids_path);
    std::vector<llama_token> ids;
    if (windows.size() == 1) ids = windows[0].tokens;
    if (n_prefill < 1 || ids.size() <= (size_t) n_prefill) {
        fprintf(stderr, "[FAIL] one line of ids, longer than N_PREFILL >= 1\n");
        return 2;
    }
    llama_model * model = load(model_path);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    llama_context * ctx = make_context(model, ids.size(), n_prefill);
    int rc = ctx ? run_decode(ctx, n_vocab, ids, n_prefill) : 2;
    if (ctx) llama_free(ctx);
    llama_model_free(model);
    return rc;
}

// The fill's ids: fixed, so both sides' timed prompts sit on the same cache, and varied (one id
// repeated is a degenerate attention pattern a head could special-case); within [0, 1000), the
// harness's id range, so valid in any vocabulary it drives.
static llama_token fill_id(int i) { return (llama_token) ((i * 7919 + 17) % 1000); }

// N_FILL throw-away ids at positions 0.., in batches of at most n_batch (the context's).
static bool fill(llama_context * ctx, int n_fill, int n_batch) {
    std::vector<llama_token> ids((size_t) n_fill);
    for (int i = 0; i < n_fill; i++) ids[(size_t) i] = fill_id(i);
    for (int at = 0; at < n_fill; at += n_batch) {
        const int n = std::min(n_batch, n_fill - at);
        if (llama_decode(ctx, llama_batch_get_one(&ids[(size_t) at], n)) != 0) {
            fprintf(stderr, "[FAIL] fill at position %d\n", at);
            return false;
        }
    }
    return true;
}

// Kernels, graphs and buffers come up before READY, so the first timed step pays none of it: the
// warm-up is the timed work's shape at its depth (after the fill, so attention over the filled
// cache is warmed too); its rows are removed, so the prompt starts at position n_fill (0 without
// a fill: the memory cleared, as in the file mode).
static bool warm_up(llama_context * ctx, int n_prefill, int n_fill) {
    std::vector<llama_token> warm((size_t) n_prefill + 1, 0);
    bool ok = llama_decode(ctx, llama_batch_get_one(warm.data(), n_prefill)) == 0 &&
              llama_decode(ctx, llama_batch_get_one(&warm[n_prefill], 1)) == 0;
    if (n_fill == 0) {
        llama_memory_clear(llama_get_memory(ctx), true);
    } else {
        ok = llama_memory_seq_rm(llama_get_memory(ctx), 0, n_fill, -1) && ok;
    }
    if (!ok) fprintf(stderr, "[FAIL] warm-up\n");
    return ok;
}

// One stdin line of exactly `want` ids in [0, n_vocab). Strict, so that a harness bug (a line
// split or merged, a stray token) fails the witness instead of shifting its steps.
static bool read_line_ids(const char * what, size_t want, int n_vocab, std::vector<llama_token> & ids) {
    std::string line;
    if (!std::getline(std::cin, line)) {
        fprintf(stderr, "[FAIL] %s: EOF, expected a line of %zu id(s)\n", what, want);
        return false;
    }
    ids.clear();
    std::istringstream in(line);
    std::string word;
    while (in >> word) {
        char * end = nullptr;
        errno = 0;
        long id = strtol(word.c_str(), &end, 10);
        if (*end != '\0' || errno != 0 || id < 0 || id >= n_vocab) {
            fprintf(stderr, "[FAIL] %s: '%.32s' is not an id in [0, %d)\n", what, word.c_str(), n_vocab);
            return false;
        }
        ids.push_back((llama_token) id);
    }
    if (ids.size() != want) {
        fprintf(stderr, "[FAIL] %s: %zu id(s) on the line, expected %zu\n", what, ids.size(), want);
        return false;
    }
    return true;
}

// `EVALBOT_STEP <argmax> <runner-up> <top-1 minus top-2 logit>`: the harness credits a head's
// runner-up where main's margin is a near tie (docs/trust.md, "Near ties"; only main's fields are
// read). The logits are libllama's host copy, which llama_decode makes whatever this prints.
static void print_step(llama_context * ctx, int n_vocab) {
    const float * logits = llama_get_logits_ith(ctx, -1);
    const llama_token top = argmax_last(ctx, n_vocab);
    llama_token second = top == 0 ? 1 : 0;
    for (llama_token i = 0; i < n_vocab; i++) {
        if (i != top && logits[i] > logits[second]) second = i;
    }
    printf("EVALBOT_STEP %d %d %.6g\n", top, second, (double) (logits[top] - logits[second]));
    fflush(stdout);  // the harness writes the next id only once it has read this line
}

// The timed span: the prompt as one batch, then each id as one step as soon as it arrives.
static int run_stepped(llama_context * ctx, int n_vocab, int n_prefill, int n_steps) {
    std::vector<llama_token> ids;
    if (!read_line_ids("prompt", (size_t) n_prefill, n_vocab, ids)) return 2;
    if (llama_decode(ctx, llama_batch_get_one(ids.data(), n_prefill)) != 0) {
        fprintf(stderr, "[FAIL] prefill\n");
        return 3;
    }
    print_step(ctx, n_vocab);
    for (int i = 1; i <= n_steps; i++) {
        const std::string what = "step " + std::to_string(i) + " of " + std::to_string(n_steps);
        if (!read_line_ids(what.c_str(), 1, n_vocab, ids)) return 2;
        if (llama_decode(ctx, llama_batch_get_one(ids.data(), 1)) != 0) {
            fprintf(stderr, "[FAIL] decode %s\n", what.c_str());
            return 3;
        }
        print_step(ctx, n_vocab);
    }
    std::string extra;
    if (std::getline(std::cin, extra)) {  // the harness closes stdin after the last STEP line
        fprintf(stderr, "[FAIL] input after the last of %d steps\n", n_steps);
        return 2;
    }
    return 0;
}

static int witness(const char * model_path, int n_prefill, int n_steps, int n_fill) {
    if (n_prefill < 1 || n_steps < 1) {
        fprintf(stderr, "[FAIL] N_PREFILL >= 1 and N_STEPS >= 1\n");
        return 2;
    }
    if (n_fill < 0) {
        fprintf(stderr, "[FAIL] N_FILL >= 0\n");
        return 2;
    }
    llama_model * model = load(model_path);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const size_t n_ids = (size_t) n_fill + (size_t) n_prefill + (size_t) n_steps;
    llama_context * ctx = make_context(model, n_ids, n_prefill);
    int rc = !ctx ? 2 : fill(ctx, n_fill, n_prefill) && warm_up(ctx, n_prefill, n_fill) ? 0 : 3;
    if (rc == 0) {
        printf("EVALBOT_READY\n");
        fflush(stdout);
        rc = run_stepped(ctx, n_vocab, n_prefill, n_steps);
    }
    if (ctx) llama_free(ctx);
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
    if (cmd == "decode" && argc == 5) {
        llama_log_set(quiet, nullptr);
        llama_backend_init();
        int rc = decode(argv[2], atoi(argv[3]), argv[4]);
        llama_backend_free();
        return rc;
    }
    if (cmd == "witness" && (argc == 5 || argc == 6)) {
        llama_log_set(quiet, nullptr);
        llama_backend_init();
        int rc = witness(argv[2], atoi(argv[3]), atoi(argv[4]), argc == 6 ? atoi(argv[5]) : 0);
        llama_backend_free();
        return rc;
    }
    if (cmd == "tokenize" && argc == 4) {
        llama_log_set(quiet, nullptr);
        return tokenize(argv[2], argv[3]);
    }
    fprintf(stderr, "usage: evalbot-topk score MODEL TOPK WINDOWS.txt | tokenize MODEL TEXT.txt"
                    " | decode MODEL N_PREFILL IDS.txt | witness MODEL N_PREFILL N_STEPS [N_FILL]\n");
    return 64;
}
