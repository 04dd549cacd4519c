// The stub's qwen3_gguf_score (runtime/examples/qwen3_gguf_score.cpp at ba8add3, its loop and
// output as they are): the teacher-forced score the profile ran before the witness tool's score
// mode. Every position through forward_token from position 0: the batched prefill never runs.
#include "sparkinfer/runtime.h"
#include "sparkinfer/kv_cache.h"
#include "sparkinfer/gguf.h"
#include "sparkinfer/models/qwen35.h"
#include "sparkinfer/moe/engine.h"
#include "qwen3_gguf_config.h"

#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    if (argc < 4) { printf("usage: %s <model.gguf> <topk> <id0> <id1> ...\n", argv[0]); return 2; }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) { printf("[SKIP] no GPU\n"); return 0; }
    const std::string path = argv[1];
    const int topk = atoi(argv[2]);
    std::vector<int> toks;
    for (int i = 3; i < argc; i++) toks.push_back(atoi(argv[i]));
    sparkinfer::GGUF g;
    if (!g.open(path)) { printf("[FAIL] cannot open %s\n", path.c_str()); return 1; }
    sparkinfer::Qwen35Config cfg;
    qwen3_config_from_gguf(g, cfg);
    cfg.max_seq = std::max(2048, (int)toks.size() + 16);
    auto rt = sparkinfer::Runtime::create({}); rt->initialize();
    sparkinfer::KVCacheConfig kvc;
    kvc.num_layers = cfg.n_layers; kvc.num_kv_heads = cfg.n_kv_heads; kvc.head_dim = cfg.head_dim; kvc.block_size = 16;
    { const char* e = getenv("SPARKINFER_KV_INT8"); kvc.int8_kv = e ? (e[0] != '0') : true; }
    sparkinfer::KVCacheManager kv(kvc, 1);
    sparkinfer::moe::MoEConfig mc;
    auto engine = sparkinfer::moe::MoEEngine::create(mc);
    sparkinfer::Qwen35Model model(cfg, &kv, engine.get());
    if (!model.load_gguf(path)) { printf("[FAIL] load_gguf\n"); return 1; }
    if (!kv.allocate(0, cfg.max_seq)) { printf("[FAIL] KV allocate\n"); return 1; }
    const int V = cfg.vocab, K = std::min(topk, V);
    std::vector<float> lg(V);
    std::vector<int> idx(V);
    double nll = 0.0; int scored = 0, ammatch = 0;
    for (size_t i = 0; i + 1 < toks.size(); i++) {
        int am = model.forward_token(toks[i], (int)i);
        model.copy_logits(lg.data());
        float mx = *std::max_element(lg.begin(), lg.end());
        double se = 0.0;
        for (int v = 0; v < V; v++) se += std::exp((double)lg[v] - mx);
        const double lse = mx + std::log(se);
        const int tgt = toks[i + 1];
        const double lp_tgt = (double)lg[tgt] - lse;
        nll += -lp_tgt; scored++;
        if (am == tgt) ammatch++;
        for (int v = 0; v < V; v++) idx[v] = v;
        std::partial_sort(idx.begin(), idx.begin() + K, idx.end(), [&](int a, int b){ return lg[a] > lg[b]; });
        printf("S i=%zu tgt=%d am=%d lp=%.6f top=", i, tgt, am, lp_tgt);
        for (int k = 0; k < K; k++) printf("%s%d:%.6f", k ? "," : "", idx[k], (double)lg[idx[k]] - lse);
        printf("\n");
    }
    printf("PPL %.5f over %d positions\n", std::exp(nll / std::max(1, scored)), scored);
    printf("ARGMATCH %d/%d %.4f\n", ammatch, scored, (double)ammatch / std::max(1, scored));
    return 0;
}
