#pragma once
// Stub of sparkinfer's runtime/examples/qwen3_gguf_config.h: the config from the "GGUF".
#include "sparkinfer/gguf.h"
#include "sparkinfer/models/qwen_config.h"

static void qwen3_config_from_gguf(const sparkinfer::GGUF& g, sparkinfer::Qwen35Config& cfg) {
    cfg.vocab      = (int)g.meta_int("vocab", cfg.vocab);
    cfg.n_layers   = (int)g.meta_int("block_count", cfg.n_layers);
    cfg.n_kv_heads = (int)g.meta_int("head_count_kv", cfg.n_kv_heads);
    cfg.head_dim   = (int)g.meta_int("key_length", cfg.head_dim);
    cfg.dense_ffn  = g.meta_int("dense_ffn", 1) != 0;
    cfg.hybrid     = true;
}
