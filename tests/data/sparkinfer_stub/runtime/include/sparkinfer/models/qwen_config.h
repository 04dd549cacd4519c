#pragma once
// Stub of sparkinfer's qwen_config.h: the fields the witness and its config helper touch.

namespace sparkinfer {

struct Qwen35Config {
    int   vocab       = 151936;
    int   hidden      = 2048;
    int   n_layers    = 40;
    int   n_q_heads   = 16;
    int   n_kv_heads  = 2;
    int   head_dim    = 128;
    int   n_experts   = 256;
    int   top_k       = 8;
    int   moe_ffn     = 512;
    int   max_seq     = 4096;   // KV-cache cap for a sequence
    bool  hybrid      = false;
    bool  dense_ffn   = false;
};

} // namespace sparkinfer
