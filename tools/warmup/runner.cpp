#include "warmup/runner.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include <fmt/format.h>

namespace warmup {
namespace {

void log_to_reporter(moejit_log_level_t level, const char *message, void *user_data) {
    static_cast<Reporter *>(user_data)->library_log(level, message);
}

struct ContextDeleter {
    void operator()(moejit_context_t c) const noexcept { moejit_context_destroy(c); }
};
using ContextPtr = std::unique_ptr<moejit_context_s, ContextDeleter>;

moejit_cache_stats_t stats_of(moejit_context_t ctx) {
    moejit_cache_stats_t s;
    moejit_cache_stats_init(&s);
    if (moejit_context_cache_stats(ctx, &s) != MOEJIT_SUCCESS) {
        moejit_cache_stats_init(&s);  // zeros: a stats failure must not fail the warmup
    }
    return s;
}

JobResult run_one(moejit_context_t ctx, const WarmupJob &job) {
    JobResult r;
    r.label = job.label;
    auto start = std::chrono::steady_clock::now();
    moejit_cache_stats_t before = stats_of(ctx);
    r.status = moejit_plan_warmup(ctx, &job.desc, &r.kernels);
    if (r.status != MOEJIT_SUCCESS) r.message = moejit_last_error();  // same thread, right away
    moejit_cache_stats_t after = stats_of(ctx);
    r.compiled = after.compiles - before.compiles;
    r.hits = (after.memory_hits + after.disk_hits) - (before.memory_hits + before.disk_hits);
    r.rejected = after.disk_rejects - before.disk_rejects;
    r.compile_seconds = after.compile_seconds - before.compile_seconds;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
}

}  // namespace

bool apply_config_flag(RunOptions &options, const std::string &flag, const std::string &value) {
    auto on_off = [&]() -> std::int32_t {
        if (value == "on") return MOEJIT_SWITCH_ON;
        if (value == "off") return MOEJIT_SWITCH_OFF;
        throw UsageError(fmt::format("{} \"{}\": expected on or off (omit it for the environment's "
                                     "setting, else the library's default)", flag, value));
    };
    if (flag == "--gather") options.gather = on_off();
    else if (flag == "--fuse-swiglu") options.fuse_swiglu = on_off();
    else if (flag == "--gemm-tile") {
        if (value.empty()) throw UsageError("--gemm-tile is empty: give a tile, or \"heuristic\" for none");
        // The library checks the tile's syntax (a usage error) when the first context is created.
        options.gemm_tile = value == "heuristic" ? std::string() : value;
    } else {
        return false;
    }
    return true;
}

moejit_context_t create_worker_context(const RunOptions &options, Reporter *log_sink, moejit_status_t &status,
                                       std::string &message) {
    moejit_context_options_t o;
    moejit_context_options_init(&o);
    o.compile_only = 1;
    o.arch = options.arch.c_str();
    o.cache_dir = options.cache_dir ? options.cache_dir->c_str() : nullptr;
    o.jit_mode = options.check ? MOEJIT_JIT_OFF : MOEJIT_JIT_ON;
    o.gather = options.gather;
    o.fuse_swiglu = options.fuse_swiglu;
    o.gemm_tile = options.gemm_tile ? options.gemm_tile->c_str() : nullptr;
    if (log_sink) {
        o.log_fn = log_to_reporter;
        o.log_user_data = log_sink;
    }
    moejit_context_t ctx = nullptr;
    status = moejit_context_create(&o, &ctx);
    if (status != MOEJIT_SUCCESS) {
        message = moejit_last_error();
        return nullptr;
    }
    return ctx;
}

RunTotals run_jobs(const std::vector<WarmupJob> &jobs, const RunOptions &options, Reporter &reporter) {
    const std::size_t slots = static_cast<std::size_t>(std::max(1, options.jobs));
    std::vector<ContextPtr> contexts(slots);  // created on first use, kept across waves
    std::vector<JobResult> results(jobs.size());
    reporter.begin(jobs.size());

    for (std::size_t begin = 0; begin < jobs.size();) {
        // One wave: jobs [begin, end) share the wave number; the next wave starts after all of
        // them, so it finds their kernels on disk (see variants.hpp).
        std::size_t end = begin;
        while (end < jobs.size() && jobs[end].wave == jobs[begin].wave) ++end;
        std::atomic<std::size_t> next{begin};
        auto worker = [&](std::size_t slot) {
            for (std::size_t i; (i = next.fetch_add(1)) < end;) {
                if (!contexts[slot]) {
                    moejit_status_t status;
                    std::string message;
                    contexts[slot].reset(create_worker_context(options, &reporter, status, message));
                    if (!contexts[slot]) {
                        results[i] = JobResult{jobs[i].label, status, "cannot create a context: " + message};
                        reporter.job_done(results[i]);
                        continue;
                    }
                }
                results[i] = run_one(contexts[slot].get(), jobs[i]);
                reporter.job_done(results[i]);
            }
        };
        std::size_t threads = std::min(slots, end - begin);
        std::vector<std::thread> pool;
        for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(worker, t);
        worker(0);
        for (std::thread &t : pool) t.join();
        begin = end;
    }
    reporter.end();

    RunTotals totals;
    for (const JobResult &r : results)
        if (r.status != MOEJIT_SUCCESS) totals.failures.push_back(r);
    for (const ContextPtr &ctx : contexts) {
        if (!ctx) continue;
        moejit_cache_stats_t s = stats_of(ctx.get());
        totals.compiled += s.compiles;
        totals.memory_hits += s.memory_hits;
        totals.disk_hits += s.disk_hits;
        totals.misses += s.misses;
        totals.rejected += s.disk_rejects;
        totals.compile_failures += s.compile_failures;
        totals.compile_seconds += s.compile_seconds;
    }
    return totals;
}

}  // namespace warmup
