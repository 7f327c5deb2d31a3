// Compiles and caches kernel specializations: memory (loaded modules, per context) and disk
// (self-checking cubin entries, atomic publish). Thread-safe.
#pragma once

#include <cuda.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/logger.hpp"
#include "runtime/disk_cache.hpp"
#include "runtime/kernel_source.hpp"
#include "base/sha256.hpp"

namespace moejit {

struct CacheCounters {
    std::uint64_t memory_hits = 0, disk_hits = 0, misses = 0, compiles = 0, compile_failures = 0,
                  disk_rejects = 0;
    double compile_seconds = 0, disk_load_seconds = 0;
};

// A loaded kernel; immutable once returned, so launches read it from any thread.
struct Kernel {
    CUfunction function = nullptr;  // null in compile-only engines
    std::string name;
    // sizeof the kernel's argument struct (KernelSource::param_bytes): what every launch passes.
    std::size_t param_bytes = 0;
    // Dynamic shared memory a launch may ask for: set once when the module is loaded.
    int max_dynamic_smem = 48 * 1024;
};

// A loaded kernel's parameters as cuFuncGetParamInfo reports them. Only parameter 0 is asked
// (the typed ABI has exactly one), so count is 0 or 1.
struct ParamLayout {
    bool checked = false;  // false: the driver cannot report them
    std::size_t count = 0;
    std::size_t offset = 0, size = 0;  // of parameter 0
};
// Why `found` is not one parameter of `expected` bytes at offset 0 (naming the kernel), or
// nothing when it is or was not checked. A mismatch means the host's and the device's argument
// structs differ: the kernel is not used (Status::internal).
std::optional<std::string> param_layout_mismatch(const std::string &kernel, std::size_t expected,
                                                 const ParamLayout &found);

struct JitOptions {
    std::string arch;        // "sm_90a"
    bool jit_enabled = true;
    bool load_modules = true;  // false: compile-only (no driver calls at all)
    std::string cache_dir;   // versioned folder; "" = memory only
    // The read-only tier of prebuilt kernels shipped with the library (prebuilt_kernels_dir(),
    // docs/DESIGN.md §4.10), looked up before cache_dir and never written; "" = none.
    std::string prebuilt_dir;
    // The device's opt-in shared memory per block: every loaded kernel may use all of it
    // beyond its static shared memory (0: leave the driver's 48 KiB default).
    int max_shared_per_block = 0;
    Logger log;
};

// Where NVRTC runs for a miss: in this process, or in a worker process if one is found.
enum class CompileIn { process, worker };

class JitEngine {
public:
    explicit JitEngine(JitOptions options);
    ~JitEngine();
    JitEngine(const JitEngine &) = delete;
    JitEngine &operator=(const JitEngine &) = delete;

    // Memory hit, else disk hit, else NVRTC compile (+ disk publish); loads the module unless
    // compile-only. The reference stays valid for the engine's lifetime. Must be called with
    // the owning CUDA context current when loading. Thread-safe: a key is resolved once while
    // other keys resolve concurrently; no lock is held across NVRTC, file I/O, the driver or
    // the log callback (messages are delivered after the key's resolution, LogBuffer).
    // `where`: CompileIn::worker sends a compile to a worker process when there is one
    // (runtime/compile_worker.hpp); Context::kernels asks for it when it compiles in parallel.
    Kernel &get(const KernelSource &source, CompileIn where = CompileIn::process);

    // The canonical cache key (sha256 of the length-prefixed record of docs/DESIGN.md §4).
    Digest key(const KernelSource &source) const;
    // The same record with the NVRTC version (major*100+minor, as text) and the toolkit headers'
    // digest given, not this process's: the prebuilt tier's key, with its build's values.
    Digest key_with(const KernelSource &source, const std::string &nvrtc_version,
                    const std::string &headers_digest) const;
    // NVRTC options, sorted, without the arch.
    const std::vector<std::string> &nvrtc_options() const { return options_sorted_; }

    CacheCounters counters() const;
    const std::string &arch() const { return options_.arch; }
    const std::string &cache_dir() const;

private:
    // One per source: resolved once (std::call_once retries after a failure), then read-only.
    struct Slot {
        std::once_flag once;
        std::atomic<bool> ready{false};
        CUmodule module = nullptr;
        Kernel kernel;
    };
    Slot &slot_for(const std::string &source);
    void resolve(const KernelSource &source, Slot &slot, CompileIn where);
    template <class F> void count(F &&update);

    JitOptions options_;
    std::vector<std::string> options_sorted_;
    std::unique_ptr<DiskCache> disk_;
    // The prebuilt tier and the NVRTC version and headers digest its kernels were built with
    // (its STAMP file); no tier when prebuilt_dir is "" or its STAMP is unreadable.
    std::unique_ptr<DiskCache> prebuilt_;
    std::string prebuilt_nvrtc_, prebuilt_headers_;
    // Guards slots_ only (lookups and insertions), never held across other work.
    mutable std::mutex slots_mutex_;
    // Keyed by the full source text (in memory only; std::hash is fine here). Slots never
    // move or disappear before the engine does, so references to their kernels stay valid.
    std::unordered_map<std::string, std::unique_ptr<Slot>> slots_;
    mutable std::mutex counters_mutex_;
    CacheCounters counters_;
};

}  // namespace moejit
