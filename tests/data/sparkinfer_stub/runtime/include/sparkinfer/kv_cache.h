#pragma once
// Stub of sparkinfer's kv_cache.h: the manager the model reads its sequence's blocks from.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <cuda_runtime.h>

namespace sparkinfer {

struct KVCacheConfig {
    int num_layers;
    int num_kv_heads;
    int head_dim;
    int block_size = 16;
    bool fp8_kv = false;
    bool int8_kv = false;
};

class KVCacheManager {
public:
    explicit KVCacheManager(const KVCacheConfig& cfg, size_t pool_bytes);
    ~KVCacheManager();
    bool allocate(uint64_t seq_id, int num_tokens);
    int allocated_tokens(uint64_t seq_id) const;
    void free(uint64_t seq_id);
    bool int8_kv() const;
    int block_size() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace sparkinfer
