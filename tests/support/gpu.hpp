// GPU test support: a device context from the public API, device buffers through the lazily
// loaded driver, NaN poisoning and the relative-error metric. Header-only.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "capi_handles.hpp"  // moejit_context_s, for the library's Context behind a handle
#include "runtime/context.hpp"
#include "runtime/driver.hpp"
#include "moejit.h"

namespace moejit::test {

inline void check_status(moejit_status_t status, const char *what) {
    if (status != MOEJIT_SUCCESS)
        throw std::runtime_error(std::string(what) + ": " + moejit_status_string(status) + ": " +
                                 moejit_last_error());
}
#define MOEJIT_TEST_OK(call) ::moejit::test::check_status((call), #call)

// One context for the whole GPU test executable, on device 0, created once and kept for the
// process (so the device's primary context stays current for DeviceBuffer allocations made
// before any op runs). Cache folder: MOEJIT_CACHE_DIR or the default, so a second run of the
// suite shows only cache hits.
struct GpuProbe {
    moejit_status_t status = MOEJIT_SUCCESS;
    std::string message;
    moejit_context_t context = nullptr;
};
inline const GpuProbe &gpu_probe() {
    static const GpuProbe probe = [] {
        GpuProbe p;
        p.status = moejit_context_create(nullptr, &p.context);
        if (p.status != MOEJIT_SUCCESS) p.message = moejit_last_error();
        return p;
    }();
    return probe;
}
inline moejit_context_t gpu_context() {
    const GpuProbe &p = gpu_probe();
    if (p.status != MOEJIT_SUCCESS)
        throw std::runtime_error(std::string("no GPU context: ") + moejit_status_string(p.status) +
                                 ": " + p.message);
    return p.context;
}

// The library's own Context behind gpu_context(), for tests of internal ops. The test main
// (gpu_main.hpp) creates it before any test case allocates device memory.
inline moejit::Context &internal_ctx() { return gpu_context()->impl; }

// Whether the shared context is sm_90a; if not, says who skips: `needs` is e.g. "the FP8 kernels need".
inline bool hopper_or_skip(const char *needs) {
    if (internal_ctx().arch() == "sm_90a") return true;
    std::printf("skipping: the context is %s, %s sm_90a\n", internal_ctx().arch().c_str(), needs);
    return false;
}

// One line per suite, so a run's log shows whether kernels were compiled or served from the
// cache (a second run of the suite must show compiles=0).
inline void print_cache_stats(const char *suite) {
    moejit_cache_stats_t s;
    moejit_cache_stats_init(&s);
    if (moejit_context_cache_stats(gpu_context(), &s) != MOEJIT_SUCCESS) return;
    std::printf("%s cache: compiles=%llu disk_hits=%llu memory_hits=%llu misses=%llu "
                "rejects=%llu compile_s=%.2f disk_load_s=%.4f\n",
                suite, (unsigned long long)s.compiles, (unsigned long long)s.disk_hits,
                (unsigned long long)s.memory_hits, (unsigned long long)s.misses,
                (unsigned long long)s.disk_rejects, s.compile_seconds, s.disk_load_seconds);
}

// For a GPU test executable's main(): 0 when a device is usable, else prints why and returns
// 77 (Meson's "skipped" exit code), so CI shows SKIP, never PASS, for GPU suites.
inline int gpu_skip_code(const char *suite) {
    const GpuProbe &p = gpu_probe();
    if (p.status == MOEJIT_ERROR_NO_DRIVER || p.status == MOEJIT_ERROR_NO_DEVICE) {
        std::printf("SKIPPED %s: no usable CUDA device (%s: %s)\n", suite,
                    moejit_status_string(p.status), p.message.c_str());
        return 77;
    }
    if (p.status != MOEJIT_SUCCESS) {
        std::printf("FAILED %s: context creation: %s: %s\n", suite, moejit_status_string(p.status),
                    p.message.c_str());
        return 1;
    }
    return 0;
}

// Owning device allocation (the test's context must be current: moejit makes the device's
// primary context current on the calling thread when the context is created).
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
        if (bytes_) MOEJIT_CU(cuMemAlloc(&ptr_, bytes_));
    }
    ~DeviceBuffer() {
        if (ptr_) driver().cuMemFree(ptr_);
    }
    DeviceBuffer(DeviceBuffer &&o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0; o.bytes_ = 0; }
    DeviceBuffer &operator=(DeviceBuffer &&o) noexcept {
        std::swap(ptr_, o.ptr_);
        std::swap(bytes_, o.bytes_);
        return *this;
    }
    void *get() const { return reinterpret_cast<void *>(ptr_); }
    template <class T> T *as() const { return reinterpret_cast<T *>(ptr_); }
    std::size_t bytes() const { return bytes_; }

    template <class T> static DeviceBuffer from(const std::vector<T> &host) {
        DeviceBuffer b(host.size() * sizeof(T));
        b.upload(host);
        return b;
    }
    template <class T> void upload(const std::vector<T> &host) {
        if (!host.empty()) MOEJIT_CU(cuMemcpyHtoD(ptr_, host.data(), host.size() * sizeof(T)));
    }
    template <class T> std::vector<T> download() const {
        std::vector<T> host(bytes_ / sizeof(T));
        MOEJIT_CU(cuCtxSynchronize());
        if (!host.empty()) MOEJIT_CU(cuMemcpyDtoH(host.data(), ptr_, host.size() * sizeof(T)));
        return host;
    }
    // Fills with all-ones bytes: NaN for fp32/bf16/fp16, -1 for integers. Every output and
    // intermediate is poisoned before a run so an unwritten element cannot pass a test.
    void poison() {
        if (bytes_) MOEJIT_CU(cuMemsetD8Async(ptr_, 0xFF, bytes_, nullptr));
        MOEJIT_CU(cuCtxSynchronize());
    }

private:
    CUdeviceptr ptr_ = 0;
    std::size_t bytes_ = 0;
};

inline void synchronize() { MOEJIT_CU(cuCtxSynchronize()); }

// Mean milliseconds of `iters` back-to-back calls of `fn` on the default stream, between two CUDA
// events (warm up first: the first calls compile).
template <class F> double mean_event_ms(int iters, F &&fn) {
    CUevent start, stop;
    MOEJIT_CU(cuEventCreate(&start, 0));
    MOEJIT_CU(cuEventCreate(&stop, 0));
    MOEJIT_CU(cuEventRecord(start, nullptr));
    for (int i = 0; i < iters; ++i) fn();
    MOEJIT_CU(cuEventRecord(stop, nullptr));
    MOEJIT_CU(cuEventSynchronize(stop));
    float ms = 0;
    MOEJIT_CU(cuEventElapsedTime(&ms, start, stop));
    MOEJIT_CU(cuEventDestroy(start));
    MOEJIT_CU(cuEventDestroy(stop));
    return static_cast<double>(ms) / iters;
}

// What `enqueue` puts on `stream` captured into a CUDA graph and instantiated (the status it
// returns is checked once the capture has ended); launch() replays the graph on `stream`.
class CapturedGraph {
public:
    template <class Enqueue>
    CapturedGraph(CUstream stream, CUstreamCaptureMode mode, Enqueue &&enqueue) : stream_(stream) {
        MOEJIT_CU(cuStreamBeginCapture(stream, mode));
        const moejit_status_t status = enqueue();
        MOEJIT_CU(cuStreamEndCapture(stream, &graph_));
        MOEJIT_TEST_OK(status);
        MOEJIT_CU(cuGraphInstantiate(&exec_, graph_, 0));
    }
    ~CapturedGraph() {
        if (exec_) driver().cuGraphExecDestroy(exec_);
        if (graph_) driver().cuGraphDestroy(graph_);
    }
    CapturedGraph(const CapturedGraph &) = delete;
    CapturedGraph &operator=(const CapturedGraph &) = delete;
    void launch() const { MOEJIT_CU(cuGraphLaunch(exec_, stream_)); }
    void launch_and_wait() const {
        launch();
        MOEJIT_CU(cuStreamSynchronize(stream_));
    }

private:
    CUstream stream_;
    CUgraph graph_ = nullptr;
    CUgraphExec exec_ = nullptr;
};

// ---- host-side half-precision conversions (round to nearest even)
inline std::uint16_t float_to_bf16(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    if (std::isnan(f)) return 0x7FC0;
    u += 0x7FFF + ((u >> 16) & 1);
    return static_cast<std::uint16_t>(u >> 16);
}
inline float bf16_to_float(std::uint16_t h) {
    std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline std::uint16_t float_to_fp16(float f) {
    // Via _Float16 where the compiler has it (g++ >= 12 on x86-64).
    _Float16 h = static_cast<_Float16>(f);
    std::uint16_t u;
    std::memcpy(&u, &h, 2);
    return u;
}
inline float fp16_to_float(std::uint16_t u) {
    _Float16 h;
    std::memcpy(&h, &u, 2);
    return static_cast<float>(h);
}
inline std::uint16_t to_half_bits(float f, moejit_dtype_t dtype) {
    return dtype == MOEJIT_DTYPE_BF16 ? float_to_bf16(f) : float_to_fp16(f);
}
inline float from_half_bits(std::uint16_t h, moejit_dtype_t dtype) {
    return dtype == MOEJIT_DTYPE_BF16 ? bf16_to_float(h) : fp16_to_float(h);
}

// Random values already rounded to the half dtype: `values` holds what the device sees, as
// doubles, so the float64 reference uses exactly the device's inputs.
struct HalfTensor {
    std::vector<std::uint16_t> bits;
    std::vector<double> values;
};
inline HalfTensor random_half(std::size_t n, moejit_dtype_t dtype, std::mt19937_64 &rng,
                              float scale = 1.0f) {
    std::normal_distribution<float> dist(0.0f, scale);
    HalfTensor t;
    t.bits.resize(n);
    t.values.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        t.bits[i] = to_half_bits(dist(rng), dtype);
        t.values[i] = from_half_bits(t.bits[i], dtype);
    }
    return t;
}
inline std::vector<double> half_to_double(const std::vector<std::uint16_t> &bits,
                                          moejit_dtype_t dtype) {
    std::vector<double> out(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) out[i] = from_half_bits(bits[i], dtype);
    return out;
}

// A fresh seed per run (printed by the caller on failure) unless MOEJIT_TEST_SEED is set.
inline std::uint64_t test_seed() {
    if (const char *s = std::getenv("MOEJIT_TEST_SEED")) return std::strtoull(s, nullptr, 10);
    static const std::uint64_t seed = std::random_device{}();
    return seed;
}

inline bool all_finite(const std::vector<double> &v) {
    for (double x : v)
        if (!std::isfinite(x)) return false;
    return true;
}

// ‖out − ref‖ / ‖ref‖ (NaN if any output is non-finite; 0/0 when both are all zero → 0).
inline double relative_error(const std::vector<double> &out, const std::vector<double> &ref) {
    if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
    double num = 0, den = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
        if (!std::isfinite(out[i])) return std::numeric_limits<double>::quiet_NaN();
        num += (out[i] - ref[i]) * (out[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    if (den == 0) return num == 0 ? 0 : std::numeric_limits<double>::infinity();
    return std::sqrt(num / den);
}

}  // namespace moejit::test
