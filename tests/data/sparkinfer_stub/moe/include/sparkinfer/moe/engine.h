#pragma once
// Stub of sparkinfer's moe/engine.h (libsparkinfer_moe.so).
#include <memory>
#include <cuda_runtime.h>

namespace sparkinfer { namespace moe {

struct MoEConfig {
    int num_experts;
    int top_k;
    int hidden_dim;
    int ffn_dim;
    int num_layers;
};

class MoEEngine {
public:
    static std::unique_ptr<MoEEngine> create(const MoEConfig& cfg);
    virtual ~MoEEngine() = default;
    virtual const MoEConfig& config() const = 0;
};

}} // namespace sparkinfer::moe
