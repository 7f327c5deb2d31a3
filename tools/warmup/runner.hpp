// Runs warmup jobs wave by wave on `jobs` worker threads, each with its own compile-only
// context (the JIT engine compiles serially within one context), all sharing the disk cache.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moejit.h"
#include "warmup/reporter.hpp"
#include "warmup/variants.hpp"

namespace warmup {

struct RunOptions {
    std::string arch;                      // explicit, e.g. "sm_90a"
    std::optional<std::string> cache_dir;  // root; nullopt: the library's default
    bool check = false;                    // JIT off: a cache miss is reported as missing
    int jobs = 1;
    // The plan configuration every context gets (moejit_context_options_t's fields: a
    // moejit_switch_t each, FROM_ENV = the MOEJIT_* variable, else the library's default; the
    // tile nullopt = MOEJIT_GEMM_TILE, else the heuristic; "" = the heuristic), so the warmed
    // kernels are the ones a plan with the same options loads.
    std::int32_t gather = MOEJIT_SWITCH_FROM_ENV;
    std::int32_t fuse_swiglu = MOEJIT_SWITCH_FROM_ENV;
    std::optional<std::string> gemm_tile;
};

// Applies a configuration flag (--gather on|off, --fuse-swiglu on|off, --gemm-tile TILE|heuristic)
// to `options`; false when `flag` is none of them. Throws UsageError on a bad value.
bool apply_config_flag(RunOptions &options, const std::string &flag, const std::string &value);

struct RunTotals {
    // moejit_context_cache_stats summed over the workers' contexts (kernel lookups are
    // memory_hits + disk_hits + misses):
    std::uint64_t compiled = 0, memory_hits = 0, disk_hits = 0, misses = 0, rejected = 0, compile_failures = 0;
    double compile_seconds = 0;
    std::vector<JobResult> failures;  // every job that did not succeed, in job order
};

// A compile-only context with the run's settings; nullptr and `status`/`message` on failure.
moejit_context_t create_worker_context(const RunOptions &options, Reporter *log_sink, moejit_status_t &status,
                                       std::string &message);

RunTotals run_jobs(const std::vector<WarmupJob> &jobs, const RunOptions &options, Reporter &reporter);

}  // namespace warmup
