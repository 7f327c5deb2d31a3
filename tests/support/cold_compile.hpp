// CPU test support: one kernel's cold compile, checked against the 2 s cold-start budget.
#pragma once

#include <boost/test/unit_test.hpp>

#include <exception>

#include "compile_only.hpp"
#include "runtime/kernel_source.hpp"
#include "thread_cpu_time.hpp"

namespace moejit::test {

// Compiles `ks` in `context` (an error fails the test with its message) and returns the CPU
// seconds it took on this thread (immune to a loaded machine), failing the test past 2 s.
inline double cold_compile_seconds(CompileOnlyContext &context, const KernelSource &ks) {
    const double start = thread_cpu_seconds();
    try {
        context.impl().kernel(ks);
    } catch (const std::exception &e) {
        BOOST_TEST(false, e.what());
    }
    const double sec = thread_cpu_seconds() - start;
    BOOST_TEST(sec < 2.0, "NVRTC took " << sec << " s of CPU (the cold-start budget is 2 s)");
    return sec;
}

}  // namespace moejit::test
