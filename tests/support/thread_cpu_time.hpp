// CPU time of the calling thread: compile-time budgets are checked on it rather than on wall
// time, so a loaded CI machine (tests running in parallel on 2 cores) cannot make them flaky.
#pragma once

#include <ctime>

namespace moejit::test {

inline double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace moejit::test
