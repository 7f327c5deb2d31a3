// The context: one device (or none, compile-only), its JIT engine and launch helpers. The C
// handle moejit_context_t holds one (capi/capi_handles.hpp).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/config.hpp"
#include "base/error.hpp"
#include "base/logger.hpp"
#include "runtime/jit_engine.hpp"

namespace moejit {

struct LaunchShape {
    std::uint32_t grid_x = 1, grid_y = 1, grid_z = 1;
    std::uint32_t block_x = 1, block_y = 1, block_z = 1;
    std::uint32_t shared_bytes = 0;
};

// moejit_context_options_t's fields, as the library uses them (capi/capi_convert.cpp makes one).
struct ContextOptions {
    // Disk cache root: null for the default ($MOEJIT_CACHE_DIR, ...), "" for memory only.
    const char *cache_dir = nullptr;
    const char *arch = nullptr;  // null: the device's own
    int device_ordinal = 0;
    bool compile_only = false;
    Logger log;
    ConfigOptions config;
};

class Context {
public:
    explicit Context(const ContextOptions &options);
    ~Context();
    Context(const Context &) = delete;
    Context &operator=(const Context &) = delete;

    bool compile_only() const { return compile_only_; }
    // The configuration resolved from the options, the environment and the defaults when the
    // context was created (runtime/config.hpp); it never changes.
    const Config &config() const { return config_; }
    // Whether grouped GEMMs tune their tiles (Config::tuning()).
    bool tuning() const { return config_.tuning(); }
    const std::string &arch() const { return jit_->arch(); }
    int sm_count() const { return sm_count_; }            // 0 when compile-only
    // The device's (major*10+minor), or the one the arch names on a compile-only context.
    int compute_capability() const { return cc_major_ * 10 + cc_minor_; }
    const Logger &log() const { return log_; }
    JitEngine &jit() { return *jit_; }

    // Compiles / loads a specialization (makes this context's CUDA context current first).
    Kernel &kernel(const KernelSource &source);
    // Every source's kernel, in order, resolving the missing ones concurrently on up to one
    // thread per core this process may use (NVRTC compiles one source per thread). The log
    // messages reach the callback on the calling thread, in source order; the first failure
    // (in source order) is rethrown after every source was tried.
    std::vector<Kernel *> kernels(const std::vector<KernelSource> &sources);

    // Launches `kernel` with its one argument struct (templates/kernel_args.h) on `stream` (a
    // CUstream as void*); a grid with a zero dimension is a no-op, so T = 0 needs no special
    // case in callers. Throws Status::invalid_argument on a compile-only context, and
    // Status::internal when `args` is not the size of the kernel's parameter.
    template <class Args> void launch(const Kernel &kernel, const LaunchShape &shape, void *stream, const Args &args) {
        static_assert(std::is_trivially_copyable_v<Args>, "kernel arguments are copied bytewise");
        static_assert(kernel_args_type<Args> != nullptr, "not a kernel argument struct of templates/kernel_args.h");
        launch_struct(kernel, shape, stream, &args, sizeof(Args));
    }

    // Makes the device's primary context current on the calling thread (no-op compile-only).
    void make_current();
    // Throws Status::invalid_argument naming `what` on a compile-only context.
    void require_device(const char *what) const;
    // The device error word (moejit.h, moejit_context_device_errors): kernels that bound
    // device-resident indices from the caller (the experts entry's offsets) atomicOr a
    // kargs::kDeviceErrorExpertOffsets-style bit into it instead of faulting. Null when
    // compile-only.
    std::uint32_t *device_errors() const { return device_errors_; }
    // Synchronises the CUDA context, then reads the word (and zeroes it with `clear`); 0 when
    // compile-only. The one host synchronisation of the mechanism, at the caller's request.
    std::uint32_t read_device_errors(bool clear);

private:
    void launch_struct(const Kernel &kernel, const LaunchShape &shape, void *stream, const void *args,
                       std::size_t bytes);

    Config config_;  // first: resolving it validates options and environment before any device work
    Logger log_;
    bool compile_only_ = false;
    int device_ordinal_ = 0;
    CUdevice device_ = 0;
    CUcontext cu_context_ = nullptr;
    int sm_count_ = 0;
    int max_shared_per_block_ = 0;  // opt-in, per block; 0 when compile-only
    int cc_major_ = 0, cc_minor_ = 0;
    std::unique_ptr<JitEngine> jit_;
    std::uint32_t *device_errors_ = nullptr;  // device memory, one word
};

}  // namespace moejit
