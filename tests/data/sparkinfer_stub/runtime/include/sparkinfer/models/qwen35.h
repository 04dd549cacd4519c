#pragma once
// Stub of sparkinfer's models/qwen35.h (ba8add3): the model class with the methods the witness
// calls, declared as the engine declares them.
#include <cstdint>
#include <string>
#include <vector>
#include "sparkinfer/kv_cache.h"
#include "sparkinfer/models/qwen_config.h"
#include "sparkinfer/moe/engine.h"

namespace sparkinfer {

class Qwen35Model {
public:
    Qwen35Model(const Qwen35Config& cfg, KVCacheManager* kv, moe::MoEEngine* engine);
    ~Qwen35Model();

    // Load weights directly from a GGUF file (native).
    bool load_gguf(const std::string& path);

    // Run one token at `position`. sample=false: no LM head (teacher-forced ingestion), returns
    // token_id; sample=true: the full path, returns the argmax next-token id.
    int forward_token(int token_id, int position, bool sample = true);

    // Copy the most recent step's logits (vocab floats) to host. Valid after a
    // forward_token() call. Used for teacher-forced scoring (perplexity / KL).
    void copy_logits(float* host_logits) const;

    const Qwen35Config& config() const;

    // Batched prompt prefill (Qwen3.5 dense-hybrid only): fills positions 0..n-1; returns the
    // argmax at the last prompt position, or -1 if the batched path is unsupported.
    int prefill_batched(const int* prompt_ids, int n);

private:
    struct Impl;
    Impl* p_;
};

} // namespace sparkinfer
