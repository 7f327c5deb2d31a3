// CPU test support for the JIT engine: a tiny kernel whose source (and so cache key) differs
// per variant, and a log callback that keeps the warnings.
#pragma once

#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/logger.hpp"
#include "runtime/jit_engine.hpp"
#include "runtime/kernel_source.hpp"

namespace moejit::test {

// An engine that compiles for sm_90a and loads nothing (no driver calls at all); cache_dir ""
// keeps the kernels in memory only.
inline JitOptions compile_only_jit_options(const std::string &cache_dir = "", Logger log = {}, bool jit = true) {
    JitOptions o;
    o.arch = "sm_90a";
    o.jit_enabled = jit;
    o.load_modules = false;
    o.cache_dir = cache_dir;
    o.log = log;
    return o;
}

// Fails the test unless `engine` refuses `ks` with a compile error whose message contains `needle`.
inline void expect_compile_error(JitEngine &engine, const KernelSource &ks, const std::string &needle) {
    try {
        engine.get(ks);
        BOOST_FAIL("a source that does not compile was accepted");
    } catch (const Error &e) {
        BOOST_TEST((e.status() == Status::compile), "status " << static_cast<int>(e.status()) << ", expected compile");
        BOOST_TEST(std::string(e.what()).find(needle) != std::string::npos, e.what());
    }
}

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
