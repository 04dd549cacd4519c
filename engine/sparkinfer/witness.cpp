// evalbot-sparkinfer-witness: evalbot's own witness tool for sparkinfer (docs/trust.md).
//
// Built by engine/sparkinfer/build_witness.py after each side's engine build, from this file (the
// harness's, never the tree's) against that side's runtime/include, moe/include,
// runtime/examples/qwen3_gguf_config.h and build/runtime/libsparkinfer_runtime.so, so the
// witness runs exactly the code of the side being evaluated, as the engine's own tools do.
// Nothing the process prints is trusted: it runs the side's library, which can do anything in
// it. What the harness relies on is the protocol: inputs it draws fresh, revealed one line at a
// time, its own clock, and output ids compared with main's.
//
//   evalbot-sparkinfer-witness prefill MODEL P N [--ctxs=LIST] [--bench-tokens=T] [--warm-prompt=W]
//       The prompt (P ids, one line) is a prefill: run as one batch through prefill_batched at
//       the KV set-up bench_decode uses, exactly as qwen3_gguf_bench's prefill cells time it.
//       `EVALBOT_STEP <the argmax prefill_batched returns for the last prompt position>`, then
//       N continuation steps: one id per line, each run by forward_token at the next position,
//       `EVALBOT_STEP <argmax>` after each. prefill_batched gives logits for no interior
//       position, so the continuation is what proves the fill: every checked id depends on the
//       KV cache and recurrent state the batched prefill wrote (qwen3_gguf_prefill_check's
//       pattern). Where prefill_batched returns -1 (the qwen35moe model: no batched prefill at
//       this commit) the prompt is filled token by token through forward_token, as bench_decode
//       then times that model's prefill cells ("token fill"); the path is said on stderr.
//       Before READY it runs the same work on throw-away ids: a prefill of W ids (default P)
//       and N steps after it. W < P bounds the box time of a long prompt's witness (a 65536-id
//       warm-up costs 14 s on the H200): any W > 8192 loads the same bf16 prefill kernels as P
//       (detail 5) and the timed prefill then pays the first allocation of its size, as the
//       bench's own prefill at that context does.
//   evalbot-sparkinfer-witness decode MODEL D N [--ctxs=LIST] [--bench-tokens=T] [--fill-seed=S]
//       Decode at depth D, as qwen3_gguf_bench's decode@D cell: before READY, untimed, the tool
//       fills positions 0..D-1 with its own ids (the batched prefill, or the token fill where
//       there is none) and runs bench_decode's 8 warm-up decode steps at D..D+7 (its graph is
//       captured there: see `fill_to_depth`). The prompt is one id, run at D+8, where the
//       bench's timed decode starts; then N steps, one id per line at D+9, D+10, ...: N + 1
//       STEP lines.
//   evalbot-sparkinfer-witness score MODEL TOPK WINDOWS.txt [--split=K]
//       Correctness scoring on the timed prefill path (engine/scoring/correctness.py through
//       engine/llamacpp/score.py --bin; not a witness: no READY, no clock). WINDOWS.txt is
//       evalbot-topk's window file: one window per line, ids separated by spaces, optionally led
//       by `@F ` (score positions F.. only). Per window it prints `W <n>` (`W <n> <F>`), one
//       `S i=.. tgt=.. am=.. lp=.. top=id:lp,...` line per scored position (TOPK log-probs,
//       qwen3_gguf_score's format, read by engine/measure/parsing.py `read_score_lines`), `END`.
//       A window led by @F (F >= 1): its first F ids are filled by prefill_batched (the path
//       the prefill cells time; the token fill where it returns -1) and are not scored (the
//       batched prefill gives no logits for interior positions); positions F..n-2 are then run
//       one at a time by forward_token and read by copy_logits, as qwen3_gguf_prefill_check
//       compares the two fills: every scored position depends on the KV cache and recurrent
//       state the batched prefill wrote. A window from 0 is teacher-forced by forward_token from
//       position 0 (qwen3_gguf_score's path) at every position, except with --split=K
//       (0 < K < n - 1): positions 0..K-1 so, then a fresh batched fill of its first K ids and
//       positions K..n-2 after it, so that one window scores both fills. Each window's fill is
//       said on stderr (`witness-score:`). One process scores every window (one model load);
//       the sequence's KV is sized for the longest. Malformed input fails with `[FAIL] ...`.
//
// The protocol (engine/contract/witness_spec.py, engine/sandbox/proc.py `Handoff`; the reference
// is engine/llamacpp/topk.cpp `witness`): load, warm up the same paths at the same sizes, print
// `EVALBOT_READY`; the harness's clock starts when it writes the prompt line. Each STEP line is
// `EVALBOT_STEP <argmax> <runner-up> <top-1 minus top-2 logit>` (`print_step`): the harness
// credits a head's runner-up where main's margin is a near tie, reading main's fields only. Each later id is
// written only after the harness has read the previous STEP line, so no two steps can share a
// forward pass. After the last STEP line the harness stops its clock and closes stdin; the tool
// exits 0 at that EOF. Malformed input (a wrong count of ids, an id outside the vocabulary, EOF
// too early, a line after the last step) fails with `[FAIL] ...` on stderr and a non-zero exit.
// After the EOF it prints one `witness-timing:` line on stderr (its own clock, for people: the
// harness times with its own).
//
// The fill of the decode mode (why the tool's own ids are sound). The fill is neither timed nor
// credited: the harness's clock starts after it, and the contract credits decode only to the N
// steps whose ids reach the process one at a time. Its ids must be the same in main's process
// and the PR's, or their STEP ids could not be compared (on these models the argmax after a step
// depends on the whole context), so they come from a fixed generator (splitmix64, `--fill-seed`,
// default below), not from the OS: the same ids in every process of every side. That is sound
// because anything a head could precompute about a known fill, it could equally compute during
// an untimed fill of unknown ids: the fill's ids give the timed steps no input they need, and
// every step's input is the harness's fresh id, known only once the previous answer was read.
// The generator differs from bench_decode's pseudo-prompt (100 + i % 20000), so a head that
// special-cases the benchmark's fill gets nothing from it here. A per-pair seed the harness
// draws (an argument the contract could allow, since the fill is credited nothing) would make
// the fill fresh per pair too; `--fill-seed` takes it.
//
// What of sparkinfer (ba8add3) this relies on, beyond runtime/include's declarations (each a
// place to look first when a head breaks the witness; tests/test_sparkinfer_witness.py covers
// those a stub can hold):
//  1. Config from the GGUF by the tree's own runtime/examples/qwen3_gguf_config.h
//     (`qwen3_config_from_gguf`), as qwen3_gguf_bench does: not an installed header.
//  2. KV set-up as qwen3_gguf_bench's init_session: max_seq = max(2048, max ctx + bench tokens
//     + 16) (SPARKINFER_BENCH_MAX_SEQ may raise it), block size 16, int8 KV unless
//     SPARKINFER_KV_INT8 says otherwise, else when the largest context >= 4096; the pool of
//     n_layers * 2 * (16 * kv_heads * head_dim) * 2 bytes per block, (max_seq + 15) / 16 + 8
//     blocks. `--ctxs` is the run's contexts and `--bench-tokens` its decode tokens (128), so
//     the witness's KV is the benchmark process's; the witness's own positions are added.
//  3. Qwen35Model uses sequence 0 of the KV manager (Impl::seq_id, private) and never
//     allocates: bench_decode allocates max_seq tokens of sequence 0 before its prefill
//     (qwen35.cpp, bench_decode). The tool allocates the same once, before the warm-up.
//  4. prefill_batched is a fresh fill of positions 0..n-1: the Gated-DeltaNet scan and conv
//     start from zero (batched_prefill.cu) and the full-attention layers write KV 0..n-1, so the
//     warm-up's state does not reach the timed prompt. It needs int8 KV (else -1), returns the
//     argmax at the last position, or -1 when unsupported (checked before any work).
//  5. prefill_batched cudaMallocs its scratch on each call and picks int8 projections for n <=
//     8192, bf16 above (SPARKINFER_PREFILL_I8); kernels load on first use. The warm-up runs a
//     prefill of the same size (or of W > 8192 ids: the same kernels) so the timed one pays
//     none of the first-call costs.
//  6. forward_token(id, pos, true) runs the decode path through a CUDA graph captured at its
//     first call and re-captured when the depth-adaptive split count (32 up to 512 tokens, then
//     160 for Qwythos up to 65536, 192 up to 98304, 128 beyond), the flash-decode mode (MMA once
//     the sequence is > 512 and each split >= 32 tokens) or the sparse-KV switch (>= 8192)
//     changes. The warm-up runs the timed positions' steps (the decode mode: bench_decode's 8
//     steps just before them), and the profile's step counts keep each witness inside one
//     band, so the timed steps replay the graph the warm-up captured (with --warm-prompt W < P
//     its steps run at W..W+N-1: the first timed step may re-capture, a few ms on both sides).
//  7. forward_token at position 0 resets the recurrent state; sample=false runs the prefill
//     graph (no LM head), as generate and cache_prefix fill a prompt token by token.
//  8. bench_decode's knobs (SPARKINFER_PREFILL_BATCHED, SPARKINFER_PREFILL_BATCHED_MAXCTX,
//     SPARKINFER_BENCH_DEVICE_LOOP, SPARKINFER_BENCH_START_POS) are bench_decode's alone: the tool
//     calls prefill_batched for any prefill, as the profile's 131072 run makes the bench do.
//  9. The bench's timed decode is a device-side feedback loop (the graph's
//     launch_decode_feedback, bench_feedback_graph) that forward_token never runs: a gain
//     confined to that loop is not seen here. Each step here also copies its argmax to the host
//     and crosses two pipes, a fixed cost on both sides: on the H200 a step took 0.7-1.1% more
//     than the bench's decode at the same depth, and the harness's clock adds ~0.08 ms a step
//     (tests/data/sparkinfer/witness-h200-timings.jsonl). Since near ties, each step also copies
//     its vocabulary of logits to a pinned host buffer and scans it (`step_margin`): ~1 MB for
//     Qwythos's 248k ids, a fixed cost on both sides, not yet measured on the H200.
// 10. The score mode: copy_logits copies the logits of the last forward_token (sample=true) to
//     the host, as qwen3_gguf_score reads them; prefill_batched followed by forward_token at
//     the next positions is qwen3_gguf_prefill_check's pattern, the engine's own statement that
//     the batched fill leaves the state a token fill does. Windows follow one another in one
//     process: each starts with forward_token at position 0 (which resets the recurrent
//     state, detail 7) or with prefill_batched (a fresh fill, detail 4), and attention reads
//     only the positions below the current one, so nothing of a window reaches the next.
#include "sparkinfer/runtime.h"
#include "sparkinfer/kv_cache.h"
#include "sparkinfer/gguf.h"
#include "sparkinfer/models/qwen35.h"
#include "sparkinfer/moe/engine.h"
#include "qwen3_gguf_config.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

const char* const READY = "EVALBOT_READY";
const char* const STEP = "EVALBOT_STEP";
const uint64_t DEFAULT_FILL_SEED = 0x5eed5a4c1f11ULL;
const uint64_t WARM_SEED = 0x3a2a4d757031ULL;  // the warm-up's throw-away ids
const int FILL_ID_RANGE = 32000;  // fill and warm-up ids: [0, min(vocab, this))
const int DECODE_WARM_STEPS = 8;  // bench_decode's warmup: decode steps after its fill
const int BENCH_TOKENS = 128;     // the profile's qwen3_gguf_bench n_tokens

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct SplitMix {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
};

std::vector<int> made_ids(uint64_t seed, int n, int vocab) {
    SplitMix g{seed};
    const uint64_t range = (uint64_t)std::min(vocab, FILL_ID_RANGE);
    std::vector<int> ids((size_t)n);
    for (int& id : ids) id = (int)(g.next() % range);
    return ids;
}

struct Args {
    std::string mode, model;
    long a = -1, n = -1;  // prefill: P and N; decode: D and N
    std::vector<long> ctxs;
    long bench_tokens = BENCH_TOKENS;
    long warm_prompt = 0;  // prefill mode: the warm-up prefill's size (0: P)
    uint64_t fill_seed = DEFAULT_FILL_SEED;
};

bool parse_long(const char* s, long& out) {
    char* end = nullptr;
    errno = 0;
    out = strtol(s, &end, 10);
    return *s != '\0' && *end == '\0' && errno == 0;
}

bool parse_args(int argc, char** argv, Args& a) {
    if (argc < 5) return false;
    a.mode = argv[1];
    a.model = argv[2];
    if ((a.mode != "prefill" && a.mode != "decode") || !parse_long(argv[3], a.a) ||
        !parse_long(argv[4], a.n))
        return false;
    for (int i = 5; i < argc; i++) {
        std::string opt = argv[i];
        long v = 0;
        if (opt.rfind("--ctxs=", 0) == 0) {
            std::string list = opt.substr(7);
            size_t at = 0;
            while (at <= list.size()) {
                size_t comma = list.find(',', at);
                std::string item = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
                if (!parse_long(item.c_str(), v) || v < 0) return false;
                a.ctxs.push_back(v);
                if (comma == std::string::npos) break;
                at = comma + 1;
            }
        } else if (opt.rfind("--bench-tokens=", 0) == 0 && parse_long(opt.c_str() + 15, v) && v >= 0) {
            a.bench_tokens = v;
        } else if (opt.rfind("--warm-prompt=", 0) == 0 && parse_long(opt.c_str() + 14, v) && v >= 1 &&
                   a.mode == "prefill") {
            a.warm_prompt = v;
        } else if (opt.rfind("--fill-seed=", 0) == 0 && parse_long(opt.c_str() + 12, v)) {
            a.fill_seed = (uint64_t)v;
        } else {
            return false;
        }
    }
    return true;
}

// One stdin line of exactly `want` ids in [0, vocab). Strict, so that a harness bug (a line
// split or merged, a stray token) fails the witness instead of shifting its steps.
bool read_line_ids(const std::string& what, size_t want, int vocab, std::vector<int>& ids) {
    static char* buf = nullptr;
    static size_t cap = 0;
    ssize_t got = getline(&buf, &cap, stdin);
    if (got < 0) {
        fprintf(stderr, "[FAIL] %s: EOF, expected a line of %zu id(s)\n", what.c_str(), want);
        return false;
    }
    ids.clear();
    char* p = buf;
    while (true) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (*p == '\0') break;
        char* end = nullptr;
        errno = 0;
        long id = strtol(p, &end, 10);
        bool word_ends = end != p && (*end == '\0' || *end == ' ' || *end == '\t' ||
                                      *end == '\n' || *end == '\r');
        if (!word_ends || errno != 0 || id < 0 || id >= vocab) {
            const int len = (int)std::min<size_t>(strcspn(p, " \t\r\n"), 32);
            fprintf(stderr, "[FAIL] %s: '%.*s' is not an id in [0, %d)\n", what.c_str(), len, p, vocab);
            return false;
        }
        ids.push_back((int)id);
        p = end;
    }
    if (ids.size() != want) {
        fprintf(stderr, "[FAIL] %s: %zu id(s) on the line, expected %zu\n", what.c_str(), ids.size(), want);
        return false;
    }
    return true;
}

struct Session {
    sparkinfer::Qwen35Config cfg{};
    std::unique_ptr<sparkinfer::Runtime> rt;
    std::unique_ptr<sparkinfer::KVCacheManager> kv;
    std::unique_ptr<sparkinfer::moe::MoEEngine> engine;
    std::unique_ptr<sparkinfer::Qwen35Model> model;
    bool batched = true;  // prefill_batched supported (else the token fill)
    float* logits = nullptr;  // a step's logits on the host (pinned: `step_logits`)
};

// Each STEP line carries, besides the argmax, the step's runner-up id and its top-1 minus
// top-2 logit margin: the harness credits a head's runner-up where main's margin is a near tie
// (docs/trust.md, "Near ties"; only main's fields are read). They come from the step's logits
// (copy_logits: valid after forward_token and prefill_batched, which both end in the LM head),
// copied into a pinned buffer first filled with NaN, so a library that skips or shortens the
// copy (saving its time in the PR's witness) fails instead: every value must arrive, finite or
// infinite, and the id the step returned must hold their largest.
bool step_margin(Session& s, int id, int& runner_up, float& margin, const char* what) {
    const int vocab = s.cfg.vocab;
    std::fill(s.logits, s.logits + vocab, std::numeric_limits<float>::quiet_NaN());
    s.model->copy_logits(s.logits);
    float second = -std::numeric_limits<float>::infinity();
    runner_up = -1;
    for (int i = 0; i < vocab; i++) {
        const float v = s.logits[i];
        if (std::isnan(v)) {
            fprintf(stderr, "[FAIL] %s: logit %d not copied (NaN)\n", what, i);
            return false;
        }
        if (i != id && (runner_up < 0 || v > second)) { second = v; runner_up = i; }
    }
    if (runner_up < 0 || s.logits[id] < second) {
        fprintf(stderr, "[FAIL] %s: returned %d, not the argmax of its logits\n", what, id);
        return false;
    }
    margin = s.logits[id] - second;
    return true;
}

// The pinned buffer `step_margin` copies into, allocated before READY (not in the timed span).
bool alloc_logits(Session& s) {
    void* p = nullptr;
    if (s.cfg.vocab < 2 || cudaMallocHost(&p, (size_t)s.cfg.vocab * sizeof(float)) != cudaSuccess ||
        p == nullptr) {
        fprintf(stderr, "[FAIL] a pinned buffer of %d logits\n", s.cfg.vocab);
        return false;
    }
    s.logits = (float*)p;
    return true;
}

bool print_step(Session& s, int id, const char* what) {
    int runner_up = -1;
    float margin = 0;
    if (!step_margin(s, id, runner_up, margin, what)) return false;
    printf("%s %d %d %.6g\n", STEP, id, runner_up, (double)margin);
    fflush(stdout);  // the harness writes the next id only once it has read this line
    return true;
}

// Details 1-3 of the header: the benchmark process's config, KV format and pool, sequence 0.
bool open_session(Session& s, const Args& a, long need) {
    sparkinfer::GGUF g;
    if (!g.open(a.model)) { fprintf(stderr, "[FAIL] open %s\n", a.model.c_str()); return false; }
    qwen3_config_from_gguf(g, s.cfg);
    long max_ctx = a.a;
    if (!a.ctxs.empty()) max_ctx = *std::max_element(a.ctxs.begin(), a.ctxs.end());
    long max_seq = std::max(2048L, max_ctx + a.bench_tokens + 16);
    if (const char* e = getenv("SPARKINFER_BENCH_MAX_SEQ")) max_seq = std::max(max_seq, atol(e));
    max_seq = std::max(max_seq, need + 16);
    if (max_seq > (1L << 30)) { fprintf(stderr, "[FAIL] max_seq %ld\n", max_seq); return false; }
    s.cfg.max_seq = (int)max_seq;

    s.rt = sparkinfer::Runtime::create({});
    s.rt->initialize();
    sparkinfer::KVCacheConfig kvc;
    kvc.num_layers = s.cfg.n_layers;
    kvc.num_kv_heads = s.cfg.n_kv_heads;
    kvc.head_dim = s.cfg.head_dim;
    kvc.block_size = 16;
    const char* e8 = getenv("SPARKINFER_KV_INT8");
    kvc.int8_kv = e8 ? (e8[0] != '0') : (max_ctx >= 4096);
    const size_t epb = (size_t)16 * s.cfg.n_kv_heads * s.cfg.head_dim;
    const size_t blocks = ((size_t)s.cfg.max_seq + 15) / 16 + 8;
    s.kv = std::make_unique<sparkinfer::KVCacheManager>(
        kvc, (size_t)s.cfg.n_layers * 2 * epb * 2 * blocks);
    sparkinfer::moe::MoEConfig mc;
    mc.num_experts = s.cfg.n_experts; mc.top_k = s.cfg.top_k;
    mc.hidden_dim = s.cfg.hidden; mc.ffn_dim = s.cfg.moe_ffn;
    mc.num_layers = s.cfg.n_layers;
    s.engine = sparkinfer::moe::MoEEngine::create(mc);
    s.model = std::make_unique<sparkinfer::Qwen35Model>(s.cfg, s.kv.get(), s.engine.get());
    if (!s.model->load_gguf(a.model)) { fprintf(stderr, "[FAIL] load_gguf\n"); return false; }
    if (!s.kv->allocate(0, s.cfg.max_seq)) {
        fprintf(stderr, "[FAIL] kv allocate (%d tokens)\n", s.cfg.max_seq);
        return false;
    }
    return alloc_logits(s);
}

// A prompt at positions 0..n-1: the batched prefill (details 4, 5), or where the model has none
// the token fill (detail 7). Returns the argmax after its last position, -1 on failure.
int fill_prompt(Session& s, const std::vector<int>& ids) {
    const int n = (int)ids.size();
    if (s.batched) {
        int seed = s.model->prefill_batched(ids.data(), n);
        if (seed >= 0) return seed;
        s.batched = false;  // unsupported for this model: the token fill, as bench_decode does
        fprintf(stderr, "sparkinfer-witness: prefill_batched returned %d: token fill\n", seed);
    }
    for (int i = 0; i + 1 < n; i++) s.model->forward_token(ids[(size_t)i], i, false);
    return s.model->forward_token(ids[(size_t)n - 1], n - 1, true);
}

bool valid(const Session& s, int id, const char* what) {
    if (id >= 0 && id < s.cfg.vocab) return true;
    cudaError_t e = cudaGetLastError();
    fprintf(stderr, "[FAIL] %s returned %d (%s)\n", what, id,
            e == cudaSuccess ? "no CUDA error" : cudaGetErrorString(e));
    return false;
}

// Before READY, the decode mode's context as bench_decode makes it: the fill of 0..D-1, then
// its 8 warm-up decode steps at D..D+7, which capture the decode graph at the timed depth.
bool fill_to_depth(Session& s, const Args& a) {
    const int depth = (int)a.a;
    std::vector<int> fill = made_ids(a.fill_seed ^ (uint64_t)depth, depth + DECODE_WARM_STEPS, s.cfg.vocab);
    if (!valid(s, fill_prompt(s, std::vector<int>(fill.begin(), fill.begin() + depth)), "the fill"))
        return false;
    for (int pos = depth; pos < depth + DECODE_WARM_STEPS; pos++)
        if (!valid(s, s.model->forward_token(fill[(size_t)pos], pos, true), "a warm-up step")) return false;
    return true;
}

// Before READY, the prefill mode's warm-up on throw-away ids: a prefill of the same size (or
// --warm-prompt's), then the same number of steps after it (details 5, 6).
bool warm_prefill(Session& s, const Args& a) {
    const int p = (int)(a.warm_prompt > 0 ? a.warm_prompt : a.a), n = (int)a.n;
    std::vector<int> warm = made_ids(WARM_SEED, p + n, s.cfg.vocab);
    if (!valid(s, fill_prompt(s, std::vector<int>(warm.begin(), warm.begin() + p)), "the warm-up prefill"))
        return false;
    for (int i = 0; i < n; i++)
        if (!valid(s, s.model->forward_token(warm[(size_t)(p + i)], p + i, true), "a warm-up step"))
            return false;
    return true;
}

struct Timing {
    double prompt_s = 0, steps_s = 0, step_min_s = 1e30, step_max_s = 0;
};

// The timed span: the prompt, then each id as one step as soon as it arrives.
int run_stepped(Session& s, const Args& a, Timing& t) {
    const bool prefill = a.mode == "prefill";
    const int n_prompt = prefill ? (int)a.a : 1;
    const int first_pos = prefill ? 0 : (int)a.a + DECODE_WARM_STEPS;  // the prompt's first position
    std::vector<int> ids;
    if (!read_line_ids("prompt", (size_t)n_prompt, s.cfg.vocab, ids)) return 2;
    auto t0 = Clock::now();
    int out = prefill ? fill_prompt(s, ids) : s.model->forward_token(ids[0], first_pos, true);
    if (!valid(s, out, prefill ? "the prompt's prefill" : "the prompt's step")) return 3;
    t.prompt_s = seconds_since(t0);
    if (!print_step(s, out, "the prompt")) return 3;
    int pos = first_pos + n_prompt;
    for (long i = 1; i <= a.n; i++, pos++) {
        const std::string what = "step " + std::to_string(i) + " of " + std::to_string(a.n);
        if (!read_line_ids(what, 1, s.cfg.vocab, ids)) return 2;
        auto t1 = Clock::now();
        out = s.model->forward_token(ids[0], pos, true);
        if (!valid(s, out, what.c_str())) return 3;
        double dt = seconds_since(t1);
        t.steps_s += dt;
        t.step_min_s = std::min(t.step_min_s, dt);
        t.step_max_s = std::max(t.step_max_s, dt);
        if (!print_step(s, out, what.c_str())) return 3;
    }
    char probe[2];
    if (fgets(probe, sizeof probe, stdin) != nullptr) {  // the harness closes stdin after the last STEP
        fprintf(stderr, "[FAIL] input after the last of %ld steps\n", a.n);
        return 2;
    }
    return 0;
}

// ---- the score mode (correctness on the timed prefill path; see the header) ------------------

struct ScoreWindow {
    long from = 0;  // first scored position; 1.. : the ids before it are the batched fill
    std::vector<int> ids;
};

// evalbot-topk's window file (engine/llamacpp/score.py `write_windows`), strictly: a stray
// word, a negative id or a window that scores nothing fails instead of shifting positions.
bool read_windows(const char* path, std::vector<ScoreWindow>& out) {
    FILE* f = fopen(path, "r");
    if (!f) { fprintf(stderr, "[FAIL] score: cannot read %s\n", path); return false; }
    char* buf = nullptr;
    size_t cap = 0;
    bool ok = true;
    while (ok && getline(&buf, &cap, f) >= 0) {
        ScoreWindow w;
        char* p = buf;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '@') {
            char* end = nullptr;
            w.from = strtol(p + 1, &end, 10);
            ok = end != p + 1 && w.from >= 0 && (*end == ' ' || *end == '\t');
            p = end;
        }
        while (ok) {
            while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
            if (*p == '\0') break;
            char* end = nullptr;
            errno = 0;
            long id = strtol(p, &end, 10);
            ok = end != p && errno == 0 && id >= 0 && id <= INT32_MAX &&
                 (*end == '\0' || *end == ' ' || *end == '\t' || *end == '\n' || *end == '\r');
            if (ok) w.ids.push_back((int)id);
            p = end;
        }
        if (!ok) {
            fprintf(stderr, "[FAIL] score: window %zu of %s is not `[@F ]id id ...`\n", out.size(), path);
        } else if (!w.ids.empty() && (w.ids.size() < 2 || (size_t)w.from + 1 >= w.ids.size())) {
            fprintf(stderr, "[FAIL] score: window %zu has %zu ids scored from %ld\n", out.size(),
                    w.ids.size(), w.from);
            ok = false;
        } else if (!w.ids.empty()) {
            out.push_back(std::move(w));
        }
    }
    free(buf);
    fclose(f);
    if (ok && out.empty()) { fprintf(stderr, "[FAIL] score: no window in %s\n", path); ok = false; }
    return ok;
}

// Descending logit, NaN first (so a NaN is printed, and the harness refuses the dump), ties by id.
bool above(const std::vector<float>& lg, int a, int b) {
    const float x = lg[(size_t)a], y = lg[(size_t)b];
    if (x != x || y != y) return (x != x) != (y != y) ? x != x : a < b;
    return x > y || (x == y && a < b);
}

// One `S` line: qwen3_gguf_score's and evalbot-topk's format, log-probs against the log-sum-exp.
std::string position_line(const std::vector<float>& lg, std::vector<int>& idx, int pos, int target,
                          int topk) {
    const float mx = *std::max_element(lg.begin(), lg.end());
    double se = 0.0;
    for (float v : lg) se += std::exp((double)v - mx);
    const double lse = mx + std::log(se);
    for (size_t v = 0; v < idx.size(); v++) idx[v] = (int)v;
    std::partial_sort(idx.begin(), idx.begin() + topk, idx.end(),
                      [&](int a, int b) { return above(lg, a, b); });
    char buf[64];
    snprintf(buf, sizeof buf, "S i=%d tgt=%d am=%d lp=%.6f top=", pos, target, idx[0],
             (double)lg[(size_t)target] - lse);
    std::string line(buf);
    for (int k = 0; k < topk; k++) {
        snprintf(buf, sizeof buf, "%s%d:%.6f", k ? "," : "", idx[(size_t)k],
                 (double)lg[(size_t)idx[(size_t)k]] - lse);
        line += buf;
    }
    return line + "\n";
}

// The score mode's stdout. The host's reduction of a position's vocabulary (log-sum-exp and
// top-k over Qwythos's 248k logits: about 4 ms on the H100's host, more than the GPU's step)
// ran between two steps and was most of a side's scoring; here a few threads reduce positions
// while the GPU computes the next ones, and one writer prints the lines in their order. Each
// line's arithmetic is the same whichever thread makes it, so the output is what one thread
// would print. A few logits buffers circulate: the steps wait only when the reducers fall
// that many positions behind.
class ScorePrinter {
public:
    ScorePrinter(size_t vocab, int topk) : topk_(topk) {
        for (int k = 0; k < BUFFERS; k++) free_.emplace_back(vocab);
        for (int k = 0; k < REDUCERS; k++)
            threads_.emplace_back([this, vocab] { reduce_all(vocab); });
        threads_.emplace_back([this] { write_all(); });
    }
    ~ScorePrinter() { finish(); }
    ScorePrinter(const ScorePrinter&) = delete;
    ScorePrinter& operator=(const ScorePrinter&) = delete;

    // A logits buffer to fill (copy_logits), handed back through position().
    std::vector<float> buffer() {
        std::unique_lock<std::mutex> lock(mu_);
        changed_.wait(lock, [this] { return !free_.empty(); });
        std::vector<float> lg = std::move(free_.back());
        free_.pop_back();
        return lg;
    }
    void position(std::vector<float>&& lg, int pos, int target) {
        push(Line{std::move(lg), pos, target, std::string(), false, false});
    }
    void line(std::string text, bool flush = false) {
        push(Line{std::vector<float>(), 0, 0, std::move(text), flush, true});
    }
    // Every queued line written, the threads gone (idempotent).
    void finish() {
        if (threads_.empty()) return;
        {
            std::lock_guard<std::mutex> lock(mu_);
            closing_ = true;
        }
        changed_.notify_all();
        for (std::thread& t : threads_) t.join();
        threads_.clear();
        fflush(stdout);
    }

private:
    static const int BUFFERS = 16;
    static const int REDUCERS = 4;
    struct Line {
        std::vector<float> lg;  // a position's logits until reduced
        int pos, target;
        std::string text;
        bool flush, done;
    };
    void push(Line line) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            lines_.push_back(std::move(line));
        }
        changed_.notify_all();
    }
    // A reducer: takes the oldest position no one has taken, makes its line outside the lock.
    void reduce_all(size_t vocab) {
        std::vector<int> idx(vocab);
        std::unique_lock<std::mutex> lock(mu_);
        for (;;) {
            changed_.wait(lock, [this] { return next_unclaimed() || closing_; });
            Line* line = next_unclaimed();
            if (line == nullptr) return;  // closing, and nothing left to reduce
            line->done = true;  // taken: ready to write once it leaves claimed_
            std::vector<float> lg = std::move(line->lg);
            const int pos = line->pos, target = line->target;
            claimed_.insert(line);
            lock.unlock();
            std::string text = position_line(lg, idx, pos, target, topk_);
            lock.lock();
            line->text = std::move(text);
            claimed_.erase(line);
            free_.push_back(std::move(lg));
            changed_.notify_all();
        }
    }
    Line* next_unclaimed() {
        for (Line& line : lines_)
            if (!line.done) return &line;
        return nullptr;
    }
    bool ready(const Line& line) const { return line.done && claimed_.count(&line) == 0; }
    void write_all() {
        std::unique_lock<std::mutex> lock(mu_);
        for (;;) {
            changed_.wait(lock, [this] { return (!lines_.empty() && ready(lines_.front())) ||
                                                (closing_ && lines_.empty()); });
            if (lines_.empty()) return;
            Line line = std::move(lines_.front());
            lines_.pop_front();
            lock.unlock();
            fputs(line.text.c_str(), stdout);
            if (line.flush) fflush(stdout);
            lock.lock();
        }
    }
    const int topk_;
    std::mutex mu_;
    std::condition_variable changed_;
    std::deque<Line> lines_;  // in output order; a deque keeps addresses on push_back/pop_front
    std::set<const Line*> claimed_;  // being reduced now
    std::vector<std::vector<float>> free_;
    std::vector<std::thread> threads_;
    bool closing_ = false;
};

// Positions [first, last) of a window, each one forward_token step on the state before it,
// its logits read by copy_logits (qwen3_gguf_score's and qwen3_gguf_prefill_check's reading).
bool score_steps(Session& s, const ScoreWindow& w, int first, int last, ScorePrinter& out) {
    for (int i = first; i < last; i++) {
        if (!valid(s, s.model->forward_token(w.ids[(size_t)i], i, true), "a scored step")) return false;
        std::vector<float> lg = out.buffer();
        s.model->copy_logits(lg.data());
        out.position(std::move(lg), i, w.ids[(size_t)i + 1]);
    }
    return true;
}

// A batched fill of the window's first n ids (the token fill where there is none).
bool score_fill(Session& s, const ScoreWindow& w, int n) {
    const std::vector<int> prefix(w.ids.begin(), w.ids.begin() + n);
    return valid(s, fill_prompt(s, prefix), "the window's prefill");
}

// One window: its `W` header, its positions in order, `END`. Returns the positions after a fill.
int score_window(Session& s, const ScoreWindow& w, long split, ScorePrinter& out) {
    const int n = (int)w.ids.size();
    const int fill = w.from > 0 ? (int)w.from : (split > 0 && split < n - 1 ? (int)split : 0);
    out.line("W " + std::to_string(n) + (w.from > 0 ? " " + std::to_string(w.from) : "") + "\n");
    if (w.from == 0 && !score_steps(s, w, 0, fill > 0 ? fill : n - 1, out)) return -1;
    if (fill > 0 && !(score_fill(s, w, fill) && score_steps(s, w, fill, n - 1, out))) return -1;
    out.line("END\n", true);
    return fill > 0 ? n - 1 - fill : 0;
}

int score_main(int argc, char** argv) {
    long topk = 0, split = 0;
    bool ok = argc >= 5 && parse_long(argv[3], topk) && topk >= 1;
    for (int i = 5; ok && i < argc; i++)
        ok = strncmp(argv[i], "--split=", 8) == 0 && parse_long(argv[i] + 8, split) && split >= 0;
    if (!ok) {
        fprintf(stderr, "usage: evalbot-sparkinfer-witness score MODEL TOPK WINDOWS.txt [--split=K]\n");
        return 64;
    }
    std::vector<ScoreWindow> windows;
    if (!read_windows(argv[4], windows)) return 2;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) { fprintf(stderr, "[FAIL] no GPU\n"); return 1; }
    Args a;
    a.mode = "score";
    a.model = argv[2];
    for (const ScoreWindow& w : windows) a.a = std::max(a.a, (long)w.ids.size());
    Session s;
    if (!open_session(s, a, a.a)) return 1;
    const int vocab = s.cfg.vocab;
    for (size_t k = 0; k < windows.size(); k++)
        for (int id : windows[k].ids)
            if (id >= vocab) {
                fprintf(stderr, "[FAIL] score: window %zu: id %d is outside the vocabulary of %d\n", k, id, vocab);
                return 2;
            }
    if (topk > vocab) { fprintf(stderr, "[FAIL] score: TOPK %ld > vocabulary %d\n", topk, vocab); return 64; }
    ScorePrinter out((size_t)vocab, (int)topk);
    for (size_t k = 0; k < windows.size(); k++) {
        auto t0 = Clock::now();
        const int after = score_window(s, windows[k], split, out);
        if (after < 0) return 3;
        fprintf(stderr, "witness-score: window %zu ids=%zu from=%ld fill=%s after_fill=%d s=%.3f\n", k,
                windows[k].ids.size(), windows[k].from,
                after == 0 ? "none" : (s.batched ? "batched" : "token-fill"), after, seconds_since(t0));
    }
    out.finish();
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc >= 2 && std::string(argv[1]) == "score") return score_main(argc, argv);
    Args a;
    if (!parse_args(argc, argv, a)) {
        fprintf(stderr, "usage: evalbot-sparkinfer-witness prefill MODEL P N [--ctxs=LIST] [--bench-tokens=T]"
                        " [--warm-prompt=W]\n"
                        "       evalbot-sparkinfer-witness decode MODEL D N [--ctxs=LIST] [--bench-tokens=T]"
                        " [--fill-seed=S]\n");
        return 64;
    }
    const bool prefill = a.mode == "prefill";
    if (a.n < 1 || a.n > 1000000 || a.a < 1 || a.a > 1000000 || a.warm_prompt > a.a) {
        fprintf(stderr, "[FAIL] %s: %s and N between 1 and 1000000, W <= P\n", a.mode.c_str(),
                prefill ? "P" : "D");
        return 64;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "[FAIL] no GPU\n");  // never exit 0 without the work (the engine's [SKIP])
        return 1;
    }
    auto t_load = Clock::now();
    Session s;
    const long need = prefill ? a.a + a.n : a.a + DECODE_WARM_STEPS + 1 + a.n;  // positions used
    if (!open_session(s, a, need)) return 1;
    if (!(prefill ? warm_prefill(s, a) : fill_to_depth(s, a))) return 3;
    const double ready_s = seconds_since(t_load);
    fprintf(stderr, "sparkinfer-witness: %s %s path, ready after %.3f s\n", a.mode.c_str(),
            s.batched ? "batched" : "token-fill", ready_s);
    printf("%s\n", READY);
    fflush(stdout);
    Timing t;
    int rc = run_stepped(s, a, t);
    if (rc == 0)
        fprintf(stderr, "witness-timing: mode=%s path=%s prompt=%ld steps=%ld ready_s=%.4f prompt_s=%.6f "
                        "step_mean_ms=%.4f step_min_ms=%.4f step_max_ms=%.4f\n",
                a.mode.c_str(), s.batched ? "batched" : "token-fill", prefill ? a.a : 1L, a.n, ready_s,
                t.prompt_s, 1e3 * t.steps_s / (double)a.n, 1e3 * t.step_min_s, 1e3 * t.step_max_s);
    return rc;
}
