// Everything the tool prints while it works, from any worker thread: a progress bar when stdout
// is a terminal, one plain line per finished descriptor otherwise, per-kernel compile times
// with --verbose, and the library's warnings (on stderr) in both cases.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "moejit.h"

namespace warmup {

struct JobResult {
    std::string label;
    moejit_status_t status = MOEJIT_SUCCESS;
    std::string message;  // moejit_last_error() on failure
    int kernels = 0;      // as reported by moejit_plan_warmup
    std::uint64_t compiled = 0, hits = 0, rejected = 0;
    double compile_seconds = 0, seconds = 0;
};

class Reporter {
public:
    Reporter(bool progress_bar, bool verbose, bool check_mode);

    void begin(std::size_t total_jobs);
    // The library's log callback lands here (any thread).
    void library_log(moejit_log_level_t level, const char *message);
    void job_done(const JobResult &result);
    void end();

    // Lines of the tool itself; they keep the progress bar intact.
    void out(const std::string &line);
    void err(const std::string &line);

private:
    void clear_bar_locked();
    void draw_bar_locked();
    double elapsed() const;

    std::mutex mutex_;
    const bool bar_, verbose_, check_;
    bool bar_shown_ = false;
    std::size_t total_ = 0, done_ = 0, failed_ = 0;
    std::uint64_t compiled_events_ = 0;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace warmup
