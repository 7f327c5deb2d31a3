// A kernel specialization ready for NVRTC: the whole rendered translation unit.
#pragma once

#include <cstdint>
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

// The usual translation unit of a specialization: a title comment, the common header and the
// template, the specialization's constants in an anonymous namespace, and an extern "C"
// wrapper `moejit_<name>` that calls the template's device function.
struct KernelWrapper {
    std::string name;           // KernelSource::name
    std::string template_name;  // e.g. "swiglu.cuh"
    std::string title;          // the first line, after "// moejit "
    std::string constants;      // lines ending in '\n' (may be empty)
    std::uint32_t threads = 0;  // __launch_bounds__
    std::string params;         // the wrapper's parameter list
    std::string call;           // the statement it runs, e.g. "moejit::sg::scatter<...>(x, ...)"
};
KernelSource wrap_kernel(const KernelWrapper &w);

}  // namespace moejit
