#include "warmup/reporter.hpp"

#include <cstdio>
#include <cstring>

#include <fmt/format.h>

namespace warmup {

Reporter::Reporter(bool progress_bar, bool verbose, bool check_mode)
    : bar_(progress_bar), verbose_(verbose), check_(check_mode) {}

double Reporter::elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Reporter::begin(std::size_t total_jobs) {
    std::lock_guard lock(mutex_);
    total_ = total_jobs;
    start_ = std::chrono::steady_clock::now();
    if (bar_) draw_bar_locked();
}

void Reporter::end() {
    std::lock_guard lock(mutex_);
    clear_bar_locked();
}

void Reporter::clear_bar_locked() {
    if (!bar_shown_) return;
    std::fputs("\r\033[K", stdout);
    std::fflush(stdout);
    bar_shown_ = false;
}

void Reporter::draw_bar_locked() {
    constexpr std::size_t width = 30;
    std::size_t filled = total_ ? done_ * width / total_ : width;
    std::string bar(filled, '#');
    bar.resize(width, '.');
    std::string text = fmt::format("\r\033[K[{}] {}/{} plans  {} {}  {} failed  {:.1f} s", bar, done_, total_,
                                   check_ ? "checked" : "compiled", check_ ? done_ : compiled_events_, failed_,
                                   elapsed());
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    bar_shown_ = true;
}

void Reporter::out(const std::string &line) {
    std::lock_guard lock(mutex_);
    clear_bar_locked();
    std::fputs((line + "\n").c_str(), stdout);
    std::fflush(stdout);
    if (bar_ && total_) draw_bar_locked();
}

void Reporter::err(const std::string &line) {
    std::lock_guard lock(mutex_);
    clear_bar_locked();
    std::fflush(stdout);
    std::fputs((line + "\n").c_str(), stderr);
    std::fflush(stderr);
    if (bar_ && total_) draw_bar_locked();
}

void Reporter::library_log(moejit_log_level_t level, const char *message) {
    std::string text = message ? message : "";
    if (level >= MOEJIT_LOG_WARNING) {
        err(std::string(level == MOEJIT_LOG_ERROR ? "error: " : "warning: ") + text);
        return;
    }
    // The JIT engine logs "moejit: compiled <name> for <arch> in <s> s" once per NVRTC compile.
    bool compile_event = level == MOEJIT_LOG_INFO && text.rfind("moejit: compiled ", 0) == 0;
    std::lock_guard lock(mutex_);
    if (compile_event) ++compiled_events_;
    if (verbose_ && (compile_event || level == MOEJIT_LOG_INFO || level == MOEJIT_LOG_DEBUG)) {
        clear_bar_locked();
        std::fputs(("  " + text + "\n").c_str(), stdout);
        std::fflush(stdout);
    }
    if (bar_) draw_bar_locked();
}

void Reporter::job_done(const JobResult &r) {
    std::lock_guard lock(mutex_);
    ++done_;
    bool ok = r.status == MOEJIT_SUCCESS;
    if (!ok) ++failed_;
    int digits = static_cast<int>(fmt::format("{}", total_).size());
    std::string head = fmt::format("[{:>{}}/{}] {}", done_, digits, total_, r.label);
    std::string line;
    if (ok) {
        line = fmt::format("{}: {} kernels, {} compiled ({:.2f} s NVRTC), {} hits{}, {:.2f} s", head, r.kernels,
                           r.compiled, r.compile_seconds, r.hits,
                           r.rejected ? fmt::format(", {} corrupt entries rebuilt", r.rejected) : "", r.seconds);
    } else if (r.status == MOEJIT_ERROR_JIT_DISABLED) {
        line = fmt::format("{}: MISSING: {}", head, r.message);
    } else {
        line = fmt::format("{}: FAILED ({}): {}", head, moejit_status_string(r.status), r.message);
    }
    clear_bar_locked();
    // A missing kernel (--check) is listed once in the final report, not here.
    bool missing = r.status == MOEJIT_ERROR_JIT_DISABLED;
    if (!ok && (!missing || verbose_)) {
        std::fflush(stdout);
        std::fputs((line + "\n").c_str(), stderr);
        std::fflush(stderr);
    } else if (ok && (!bar_ || verbose_)) {
        std::fputs((line + "\n").c_str(), stdout);
        std::fflush(stdout);
    }
    if (bar_) draw_bar_locked();
}

}  // namespace warmup
