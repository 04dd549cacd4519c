// The stub libsparkinfer_moe.so.
#include "sparkinfer/moe/engine.h"

namespace sparkinfer { namespace moe {
namespace {
struct StubEngine : MoEEngine {
    MoEConfig cfg;
    explicit StubEngine(const MoEConfig& c) : cfg(c) {}
    const MoEConfig& config() const override { return cfg; }
};
}  // namespace
std::unique_ptr<MoEEngine> MoEEngine::create(const MoEConfig& cfg) { return std::make_unique<StubEngine>(cfg); }
}}  // namespace sparkinfer::moe
