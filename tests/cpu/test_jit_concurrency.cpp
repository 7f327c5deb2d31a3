// The JIT engine under concurrency, no GPU needed: one compile per key however many threads ask,
// no lock held across the user's log callback (a callback may call back into the library), and
// a context resolving many sources at once (a plan's creation) in parallel, delivering the
// messages on the calling thread in source order.
#define BOOST_TEST_MODULE jit_concurrency
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "compile_only.hpp"
#include "jit_test_kernels.hpp"
#include "print_enums.hpp"
#include "runtime/context.hpp"
#include "base/error.hpp"
#include "runtime/jit_engine.hpp"

using namespace moejit;
using moejit::test::CompileOnlyContext;

namespace {

// A small kernel whose source (and so key) differs per variant; a negative variant does not
// compile.
KernelSource tiny_kernel(int variant) {
    KernelSource s;
    s.name = "test_concurrency_" + std::to_string(variant < 0 ? 999 : variant);
    s.template_name = "moejit_common.cuh";
    s.entry = "moejit_test_scale";
    s.source = fmt::format(R"(#include "moejit_common.cuh"
constexpr float kScale = {}.0f;
extern "C" __global__ void moejit_test_scale(float *y, int n) {{
    long long i = moejit::global_thread_id();
    if (i < n) y[i] *= kScale{};
}}
)", variant + 2, variant < 0 ? " + not_declared" : "");
    return s;
}

// Runs `body` on another thread; a deadlock there fails the test (and ends the process, since a
// blocked thread cannot be joined) instead of hanging the suite.
template <class F> void finishes_within(std::chrono::seconds limit, const char *what, F body) {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> finished = done->get_future();
    std::thread([done, body]() mutable {
        try {
            body();
            done->set_value();
        } catch (...) {
            done->set_exception(std::current_exception());
        }
    }).detach();
    if (finished.wait_for(limit) != std::future_status::ready) {
        std::fprintf(stderr, "error: %s did not finish within %lld s (a deadlock)\n", what,
                     static_cast<long long>(limit.count()));
        std::fflush(stderr);
        ::_exit(1);
    }
    finished.get();  // rethrows a failure of the body
}

}  // namespace

BOOST_AUTO_TEST_CASE(log_callback_calls_back_into_the_engine) {
    // The callback asks the engine for its counters and for another kernel while the engine
    // reports a compile. 0.3.0 held its one mutex across the callback: this deadlocked.
    struct State {
        JitEngine *engine = nullptr;
        std::atomic<int> reentered{0};
        std::atomic<bool> inside{false};
    } state;
    auto callback = [](LogLevel, const char *, void *user) {
        auto &s = *static_cast<State *>(user);
        if (s.inside.exchange(true)) return;  // one level of re-entry is enough
        (void)s.engine->counters();
        s.engine->get(tiny_kernel(7));
        ++s.reentered;
        s.inside = false;
    };
    JitEngine engine(moejit::test::compile_only_jit_options("", Logger{callback, &state}));
    state.engine = &engine;
    finishes_within(std::chrono::seconds(300), "a compile whose log callback re-enters the engine",
                    [&] { engine.get(tiny_kernel(1)); });
    BOOST_TEST(state.reentered.load() >= 1);
    const CacheCounters c = engine.counters();
    BOOST_TEST(c.compiles == 2u);  // variant 1, and variant 7 from inside the callback
}

BOOST_AUTO_TEST_CASE(one_key_compiles_once_across_threads) {
    JitEngine engine(moejit::test::compile_only_jit_options());
    const KernelSource source = tiny_kernel(3);
    std::vector<std::thread> threads;
    std::vector<const Kernel *> got(6, nullptr);
    for (std::size_t i = 0; i < got.size(); ++i)
        threads.emplace_back([&, i] { got[i] = &engine.get(source); });
    for (std::thread &t : threads) t.join();
    for (const Kernel *k : got) BOOST_TEST(k == got[0]);
    const CacheCounters c = engine.counters();
    BOOST_TEST(c.compiles == 1u);
    BOOST_TEST(c.memory_hits == got.size() - 1);
}

BOOST_AUTO_TEST_CASE(a_failed_compile_is_retried_and_reported_every_time) {
    JitEngine engine(moejit::test::compile_only_jit_options());
    for (int attempt = 0; attempt < 2; ++attempt) moejit::test::expect_compile_error(engine, tiny_kernel(-1), "not_declared");
    BOOST_TEST(engine.counters().compile_failures == 2u);
}

BOOST_AUTO_TEST_CASE(context_resolves_many_sources_in_parallel) {
    // A plan's creation: every source at once, a duplicate among them, one that fails. Every
    // good source is compiled once, the failure is rethrown after all were tried, and the
    // messages reach the callback on the calling thread in source order.
    struct Log {
        std::thread::id caller = std::this_thread::get_id();
        std::vector<std::string> compiled;
        bool foreign_thread = false;
    } log;
    moejit_context_options_t o;
    moejit_context_options_init(&o);
    o.compile_only = 1;
    o.arch = "sm_90a";
    o.cache_dir = "";
    o.log_fn = [](moejit_log_level_t level, const char *msg, void *user) {
        auto &l = *static_cast<Log *>(user);
        if (std::this_thread::get_id() != l.caller) l.foreign_thread = true;
        const std::string text(msg);
        if (level == MOEJIT_LOG_INFO && text.find("compiled ") != std::string::npos)
            l.compiled.push_back(text.substr(text.find("test_concurrency_"), 19));
    };
    o.log_user_data = &log;
    moejit_context_t handle = nullptr;
    BOOST_REQUIRE(moejit_context_create(&o, &handle) == MOEJIT_SUCCESS);
    Context &ctx = handle->impl;

    const std::vector<KernelSource> sources = {tiny_kernel(10), tiny_kernel(11), tiny_kernel(10), tiny_kernel(12)};
    const std::vector<Kernel *> kernels = ctx.kernels(sources);
    BOOST_REQUIRE(kernels.size() == sources.size());
    BOOST_TEST(kernels[0] == kernels[2]);
    BOOST_TEST(kernels[0] != kernels[1]);
    BOOST_TEST(kernels[3]->name == "test_concurrency_12");
    BOOST_TEST(ctx.jit().counters().compiles == 3u);
    BOOST_TEST(!log.foreign_thread);
    BOOST_TEST((log.compiled == std::vector<std::string>{"test_concurrency_10", "test_concurrency_11",
                                                         "test_concurrency_12"}));

    std::vector<KernelSource> with_failure = {tiny_kernel(20), tiny_kernel(-1), tiny_kernel(21)};
    try {
        ctx.kernels(with_failure);
        BOOST_FAIL("a source that does not compile was accepted");
    } catch (const Error &e) {
        BOOST_TEST(e.status() == Status::compile);
    }
    // Both good sources were still compiled (and are memory hits now).
    const CacheCounters before = ctx.jit().counters();
    ctx.kernel(tiny_kernel(20));
    ctx.kernel(tiny_kernel(21));
    BOOST_TEST(ctx.jit().counters().compiles == before.compiles);
    moejit_context_destroy(handle);
}
