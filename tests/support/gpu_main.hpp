// main() for a GPU test executable: exits 77 — Meson's "skipped" — with a clear message when
// no CUDA device is usable, so CI never counts a GPU suite as passed. The Boost.Test framework
// itself is compiled once (support/boost_test_framework.cpp), without a main.
#pragma once

#include <boost/test/unit_test.hpp>

#ifndef BOOST_TEST_ALTERNATIVE_INIT_API
#error "tests/meson.build defines BOOST_TEST_ALTERNATIVE_INIT_API for every test file"
#endif

#include "gpu.hpp"

#define MOEJIT_GPU_TEST_MAIN(suite_name)                                              \
    static bool moejit_init_unit_test() {                                             \
        boost::unit_test::framework::master_test_suite().p_name.value = suite_name;   \
        std::printf("%s: MOEJIT_TEST_SEED=%llu\n", suite_name,                        \
                    static_cast<unsigned long long>(::moejit::test::test_seed()));    \
        return true;                                                                  \
    }                                                                                 \
    int main(int argc, char **argv) {                                                 \
        if (int code = ::moejit::test::gpu_skip_code(suite_name)) return code;        \
        int code = boost::unit_test::unit_test_main(&moejit_init_unit_test, argc, argv); \
        ::moejit::test::print_cache_stats(suite_name);                                \
        return code;                                                                  \
    }
