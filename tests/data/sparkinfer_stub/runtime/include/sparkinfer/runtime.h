#pragma once
// Stub of sparkinfer's runtime.h.
#include <cstddef>
#include <memory>

namespace sparkinfer {

struct RuntimeConfig {
    int device_id = 0;
    size_t kv_cache_bytes = 0;
};

class Runtime {
public:
    static std::unique_ptr<Runtime> create(const RuntimeConfig& cfg);
    virtual ~Runtime() = default;
    virtual void initialize() = 0;
    virtual void shutdown() = 0;
};

} // namespace sparkinfer
