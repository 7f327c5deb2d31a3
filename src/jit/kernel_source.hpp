// A kernel specialization ready for NVRTC: the whole rendered translation unit.
#pragma once

#include <string>

namespace moejit {

struct KernelSource {
    // Readable, file-name safe ([a-z0-9_]), e.g. "scatter_bf16_h2048_k8"; names the cache file.
    std::string name;
    // The embedded template the source includes, e.g. "scatter_gather.cuh" (part of the key).
    std::string template_name;
    // The `extern "C" __global__` entry point defined by `source`.
    std::string entry;
    // The full translation unit: constants rendered with fmt, then #include of the template,
    // then the extern "C" wrapper. Hashed whole into the cache key.
    std::string source;
};

}  // namespace moejit
