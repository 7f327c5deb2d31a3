#include "gemm/gemm_tuner.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "base/error.hpp"
#include "gemm/tuning.hpp"
#include "runtime/driver.hpp"

namespace moejit {
namespace {

constexpr int kTimedRuns = 3;

// Owns the two events of one timing.
struct EventPair {
    CUevent start = nullptr, stop = nullptr;
    EventPair() {
        MOEJIT_CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
        MOEJIT_CU(cuEventCreate(&stop, CU_EVENT_DEFAULT));
    }
    ~EventPair() {
        if (start) driver().cuEventDestroy(start);
        if (stop) driver().cuEventDestroy(stop);
    }
    EventPair(const EventPair &) = delete;
    EventPair &operator=(const EventPair &) = delete;
};

bool skippable(const Error &e) {
    const Status s = e.status();
    return s == Status::unsupported || s == Status::compile || s == Status::jit_disabled;
}

}  // namespace

GemmTileConfig tuned_tile(Context &ctx, const GemmProblem &problem, std::int64_t rows, void *stream,
                          const GemmTileConfig &fallback, bool may_repeat,
                          const std::function<void(const GemmTileConfig &)> &launch) {
    const int cc = ctx.compute_capability();
    const std::string key = tuning_key(problem, rows, cc);
    TuningStore &store = tuning_store(ctx.jit().cache_dir());
    if (std::optional<GemmTileConfig> winner = store.find(key)) {
        try {
            validate_tile_config(*winner, problem, cc);
            return *winner;
        } catch (const Error &) {
            // a stale or foreign file: tune again below
        }
    }
    if (!may_repeat) return fallback;
    ctx.make_current();
    const auto cu_stream = static_cast<CUstream>(stream);
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    MOEJIT_CU(cuStreamIsCapturing(cu_stream, &capture));
    if (capture != CU_STREAM_CAPTURE_STATUS_NONE) return fallback;  // no syncs inside a capture

    EventPair events;
    GemmTileConfig best = fallback;
    float best_ms = std::numeric_limits<float>::infinity(), fallback_ms = best_ms;
    for (const GemmTileConfig &candidate : tuning_candidates(problem, cc)) {
        try {
            launch(candidate);  // compiles and warms up
        } catch (const Error &e) {
            if (!skippable(e)) throw;
            continue;
        }
        MOEJIT_CU(cuEventRecord(events.start, cu_stream));
        for (int i = 0; i < kTimedRuns; ++i) launch(candidate);
        MOEJIT_CU(cuEventRecord(events.stop, cu_stream));
        MOEJIT_CU(cuEventSynchronize(events.stop));
        float ms = 0;
        MOEJIT_CU(cuEventElapsedTime(&ms, events.start, events.stop));
        if (candidate == fallback) fallback_ms = ms / kTimedRuns;
        if (ms / kTimedRuns < best_ms) {
            best_ms = ms / kTimedRuns;
            best = candidate;
        }
    }
    if (best_ms == std::numeric_limits<float>::infinity()) return fallback;  // nothing ran
    store.save(key, best);
    ctx.log()(LogLevel::info, fmt::format("moejit: tuned {}: {} ({:.4f} ms; the heuristic's {} {:.4f} ms)", key,
                                            to_string(best), best_ms, to_string(fallback), fallback_ms));
    return best;
}

}  // namespace moejit
