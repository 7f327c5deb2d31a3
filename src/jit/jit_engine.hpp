// Compiles and caches kernel specializations: memory (loaded modules, per context) and disk
// (self-checking cubin entries, atomic publish). Thread-safe.
#pragma once

#include <cuda.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/logger.hpp"
#include "jit/disk_cache.hpp"
#include "jit/kernel_source.hpp"
#include "jit/sha256.hpp"

namespace moejit {

struct CacheCounters {
    std::uint64_t memory_hits = 0, disk_hits = 0, misses = 0, compiles = 0, compile_failures = 0,
                  disk_rejects = 0;
    double compile_seconds = 0, disk_load_seconds = 0;
};

struct Kernel {
    CUfunction function = nullptr;  // null in compile-only engines
    std::string name;
    int dynamic_smem_limit = 48 * 1024;  // raised with cuFuncSetAttribute on demand
};

struct JitOptions {
    std::string arch;        // "sm_90a"
    bool jit_enabled = true;
    bool load_modules = true;  // false: compile-only (no driver calls at all)
    std::string cache_dir;   // versioned folder; "" = memory only
    Logger log;
};

class JitEngine {
public:
    explicit JitEngine(JitOptions options);
    ~JitEngine();
    JitEngine(const JitEngine &) = delete;
    JitEngine &operator=(const JitEngine &) = delete;

    // Memory hit, else disk hit, else NVRTC compile (+ disk publish); loads the module unless
    // compile-only. The reference stays valid for the engine's lifetime. Must be called with
    // the owning CUDA context current when loading.
    Kernel &get(const KernelSource &source);

    // The canonical cache key (sha256 of the length-prefixed record of DESIGN.md §4).
    Digest key(const KernelSource &source) const;
    // NVRTC options, sorted, without the arch.
    const std::vector<std::string> &nvrtc_options() const { return options_sorted_; }

    CacheCounters counters() const;
    const std::string &arch() const { return options_.arch; }
    const std::string &cache_dir() const;

private:
    JitOptions options_;
    std::vector<std::string> options_sorted_;
    std::unique_ptr<DiskCache> disk_;
    mutable std::mutex mutex_;
    CacheCounters counters_;
    struct Entry {
        CUmodule module = nullptr;
        Kernel kernel;
    };
    // Keyed by the full source text (in memory only; std::hash is fine here).
    std::unordered_map<std::string, std::unique_ptr<Entry>> loaded_;
};

}  // namespace moejit
