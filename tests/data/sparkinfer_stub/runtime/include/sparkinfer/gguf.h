#pragma once
// Stub of sparkinfer's gguf.h: a "GGUF" here is a text file of key=value lines.
#include <string>
#include <unordered_map>

namespace sparkinfer {

struct GGUFTensor {
    int  ggml_type = 0;
    int  n_dims = 0;
    long dims[4] = {1, 1, 1, 1};
};

class GGUF {
public:
    bool open(const std::string& path);
    long        meta_int(const std::string& key, long def = 0) const;
    double      meta_float(const std::string& key, double def = 0) const;
    std::string meta_str(const std::string& key, const std::string& def = "") const;
    const GGUFTensor* tensor(const std::string& name) const;

private:
    std::unordered_map<std::string, std::string> kv_;
};

} // namespace sparkinfer
