// CPU test support for the JIT engine: a tiny kernel whose source (and so cache key) differs
// per variant, and a log callback that keeps the warnings.
#pragma once

#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/logger.hpp"
#include "runtime/kernel_source.hpp"

namespace moejit::test {

// Named "<stem>_<variant>" with the entry "moejit_<stem>".
inline KernelSource tiny_kernel(int variant = 0, const std::string &stem = "test_axpy") {
    KernelSource s;
    s.name = stem + "_" + std::to_string(variant);
    s.template_name = "moejit_common.cuh";
    s.entry = "moejit_" + stem;
    s.source = fmt::format(R"(#include "moejit_common.cuh"
constexpr float kAlpha = {}.0f;
extern "C" __global__ void {}(const __nv_bfloat16 *x, float *y, int n) {{
    long long i = moejit::global_thread_id();
    if (i < n) y[i] += kAlpha * moejit::to_float(x[i]);
}}
)", variant + 2, s.entry);
    return s;
}

struct LogCapture {
    std::vector<std::string> warnings;
    static void callback(LogLevel level, const char *msg, void *user) {
        if (level >= LogLevel::warning) static_cast<LogCapture *>(user)->warnings.emplace_back(msg);
    }
    Logger logger() { return Logger{&LogCapture::callback, this}; }
};

}  // namespace moejit::test
