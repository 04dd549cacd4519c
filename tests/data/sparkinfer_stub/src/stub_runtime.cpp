// The stub libsparkinfer_runtime.so (README.md): a "model" that is a hash of the sequence so far.
#include "sparkinfer/gguf.h"
#include "sparkinfer/kv_cache.h"
#include "sparkinfer/models/qwen35.h"
#include "sparkinfer/runtime.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <time.h>

#ifndef STUB_PREFILL_US
#define STUB_PREFILL_US 0
#endif
#ifndef STUB_STEP_US
#define STUB_STEP_US 0
#endif

namespace {
uint64_t fmix(uint64_t k) {
    k ^= k >> 33; k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ULL;
    return k ^ (k >> 33);
}
const uint64_t SEED = 0x5157454e3335ULL;  // the state at position 0
uint64_t fold(uint64_t h, int id, int pos) {
    return fmix(h ^ fmix((uint64_t)id * 0x100000001b3ULL + (uint64_t)pos));
}
void work(long us) {
    if (us <= 0) return;
    timespec t{us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&t, &t) != 0) {}
}
[[noreturn]] void die(const char* what, int a, int b) {
    fprintf(stderr, "stub: FATAL %s (%d, %d)\n", what, a, b);
    abort();
}
}  // namespace

namespace sparkinfer {

bool GGUF::open(const std::string& path) {
    std::ifstream f(path);
    if (!f) return false;
    std::string line;
    while (std::getline(f, line)) {
        size_t eq = line.find('=');
        if (eq != std::string::npos) kv_[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return kv_.count("vocab") > 0;
}
long GGUF::meta_int(const std::string& key, long def) const {
    auto it = kv_.find(key);
    return it == kv_.end() ? def : atol(it->second.c_str());
}
double GGUF::meta_float(const std::string& key, double def) const {
    auto it = kv_.find(key);
    return it == kv_.end() ? def : atof(it->second.c_str());
}
std::string GGUF::meta_str(const std::string& key, const std::string& def) const {
    auto it = kv_.find(key);
    return it == kv_.end() ? def : it->second;
}
const GGUFTensor* GGUF::tensor(const std::string&) const { return nullptr; }

namespace {
struct StubRuntime : Runtime {
    void initialize() override { fprintf(stderr, "stub: runtime initialized\n"); }
    void shutdown() override {}
};
}  // namespace
std::unique_ptr<Runtime> Runtime::create(const RuntimeConfig&) { return std::make_unique<StubRuntime>(); }

struct KVCacheManager::Impl {
    KVCacheConfig cfg;
    int seq0 = 0;  // tokens allocated to sequence 0
};
KVCacheManager::KVCacheManager(const KVCacheConfig& cfg, size_t pool_bytes) : impl_(new Impl()) {
    impl_->cfg = cfg;
    fprintf(stderr, "stub: kv int8=%d block=%d pool_bytes=%zu\n", cfg.int8_kv ? 1 : 0, cfg.block_size,
            pool_bytes);
}
KVCacheManager::~KVCacheManager() = default;
bool KVCacheManager::allocate(uint64_t seq_id, int num_tokens) {
    fprintf(stderr, "stub: kv allocate seq=%llu tokens=%d\n", (unsigned long long)seq_id, num_tokens);
    if (seq_id == 0 && num_tokens > impl_->seq0) impl_->seq0 = num_tokens;
    return true;
}
int KVCacheManager::allocated_tokens(uint64_t seq_id) const { return seq_id == 0 ? impl_->seq0 : 0; }
void KVCacheManager::free(uint64_t seq_id) { if (seq_id == 0) impl_->seq0 = 0; }
bool KVCacheManager::int8_kv() const { return impl_->cfg.int8_kv; }
int KVCacheManager::block_size() const { return impl_->cfg.block_size; }

struct Qwen35Model::Impl {
    Qwen35Config cfg;
    KVCacheManager* kv = nullptr;
    uint64_t h = SEED;
    int len = 0;  // positions filled
    bool loaded = false;
    // The "logits" after the latest step: every id a value in [0, 1) from the state, but the
    // argmax 2 and its runner-up `gap` below it; the gap is under 0.05 in half of the states (a
    // near tie). STUB_FLIP_BELOW=g (environment): a head with other numerics, whose argmax and
    // runner-up swap where the gap is under g (as bf16 noise flips only near-tied logits).
    int top() const { return (int)(fmix(h + 0x9e37ULL) % (uint64_t)cfg.vocab); }
    int second() const { return (int)((top() + 1 + fmix(h + 0x51ULL) % (uint64_t)(cfg.vocab - 1)) % (uint64_t)cfg.vocab); }
    float gap() const { return (float)(fmix(h + 0x7a9ULL) % 100) / 1000.0f; }
    bool flipped() const {
        const char* e = getenv("STUB_FLIP_BELOW");
        return e && gap() < (float)atof(e);
    }
    int argmax() const { return flipped() ? second() : top(); }
    void room(int pos) const {
        if (pos >= kv->allocated_tokens(0)) die("position beyond sequence 0's KV blocks", pos, kv->allocated_tokens(0));
    }
};

Qwen35Model::Qwen35Model(const Qwen35Config& cfg, KVCacheManager* kv, moe::MoEEngine*) : p_(new Impl()) {
    p_->cfg = cfg;
    p_->kv = kv;
    fprintf(stderr, "stub: model max_seq=%d vocab=%d\n", cfg.max_seq, cfg.vocab);
}
Qwen35Model::~Qwen35Model() { delete p_; }
const Qwen35Config& Qwen35Model::config() const { return p_->cfg; }

bool Qwen35Model::load_gguf(const std::string& path) {
    GGUF g;
    p_->loaded = g.open(path);
    fprintf(stderr, "stub: load_gguf %s\n", p_->loaded ? "ok" : "failed");
    return p_->loaded;
}

int Qwen35Model::prefill_batched(const int* ids, int n) {
    Impl& s = *p_;
    if (!s.loaded) die("prefill_batched before load_gguf", n, 0);
    if (!s.cfg.dense_ffn || !s.kv->int8_kv() || n <= 0) {
        fprintf(stderr, "stub: prefill_batched n=%d unsupported\n", n);
        return -1;
    }
    s.room(n - 1);
    const char* e = getenv("STUB_PREFILL_SKIP");
    const int skip = e ? atoi(e) : 0;
    s.h = SEED;  // a fresh fill: nothing of the state before it remains
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= s.cfg.vocab) die("prefill id outside the vocabulary", i, ids[i]);
        if (i >= skip) s.h = fold(s.h, ids[i], i);
    }
    s.len = n;
    work((long)STUB_PREFILL_US * n);
    fprintf(stderr, "stub: prefill_batched n=%d first=%d last=%d\n", n, ids[0], ids[n - 1]);
    return s.argmax();
}

int Qwen35Model::forward_token(int id, int pos, bool sample) {
    Impl& s = *p_;
    if (!s.loaded) die("forward_token before load_gguf", id, pos);
    if (pos == 0) { s.h = SEED; s.len = 0; }  // the engine resets its recurrent state at 0
    if (pos != s.len) die("forward_token not at the next position", pos, s.len);
    if (id < 0 || id >= s.cfg.vocab) die("forward_token id outside the vocabulary", id, pos);
    s.room(pos);
    s.h = fold(s.h, id, pos);
    s.len = pos + 1;
    work(sample ? STUB_STEP_US : STUB_PREFILL_US);
    fprintf(stderr, "stub: forward_token pos=%d sample=%d\n", pos, sample ? 1 : 0);
    return sample ? s.argmax() : id;
}

void Qwen35Model::copy_logits(float* host_logits) const {
    const Impl& s = *p_;
    const char* e = getenv("STUB_LOGITS_COPIED");  // a head whose copy stops short of the vocab
    const int n = e ? atoi(e) : s.cfg.vocab;
    for (int i = 0; i < n && i < s.cfg.vocab; i++)
        host_logits[i] = (float)(fmix(s.h ^ ((uint64_t)i * 0x9e3779b97f4a7c15ULL)) % 1000) / 1000.0f;
    const int top = s.argmax(), second = top == s.top() ? s.second() : s.top();
    if (top < n) host_logits[top] = 2.0f;
    if (second < n) host_logits[second] = 2.0f - s.gap();
    const char* nan = getenv("STUB_LOGITS_NAN");  // a broken kernel: NaN in the logits
    if (nan && nan[0] == '1' && top < n) host_logits[top] = std::nanf("");
}

}  // namespace sparkinfer
