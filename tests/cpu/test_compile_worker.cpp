// NVRTC in worker processes (runtime/compile_worker.hpp): the worker compiles what the process
// compiles, bit for bit; a source that does not compile comes back as Status::compile with the
// log; a worker refuses requests of another protocol or library version; the variable that picks
// processes or threads is strict.
#define BOOST_TEST_MODULE compile_worker
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <boost/test/unit_test.hpp>

#include "base/error.hpp"
#include "moejit_version.h"
#include "runtime/compile_worker.hpp"
#include "runtime/config.hpp"
#include "runtime/jit_engine.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "jit_test_kernels.hpp"

using namespace moejit;

namespace {

std::vector<std::string> sorted_default_options() {
    std::vector<std::string> o = default_nvrtc_options();
    std::sort(o.begin(), o.end());
    return o;
}

// A request as the library writes it (compile_worker.cpp's exchange), with a chosen version.
std::string request(const KernelSource &s, const std::string &version, const std::string &protocol = "moejit-compile-1") {
    std::string out;
    auto put = [&](const std::string &v) {
        const std::uint64_t n = v.size();
        for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
        out += v;
    };
    put(protocol);
    put(version);
    put("sm_90a");
    put(s.name);
    put(s.template_name);
    put(s.entry);
    put(s.source);
    put("0");
    return out;
}

// compile_worker_main on `in`; its exit code and what it wrote.
std::pair<int, std::string> run_worker(const std::string &in) {
    std::FILE *i = std::tmpfile(), *o = std::tmpfile();
    BOOST_REQUIRE(i && o);
    std::fwrite(in.data(), 1, in.size(), i);
    std::rewind(i);
    const int code = compile_worker_main(i, o);
    std::string out(static_cast<std::size_t>(std::ftell(o)), '\0');
    std::rewind(o);
    if (!out.empty()) BOOST_REQUIRE(std::fread(out.data(), 1, out.size(), o) == out.size());
    std::fclose(i);
    std::fclose(o);
    return {code, out};
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_build_has_a_worker) {
    // The test executables sit in build/tests/, the worker in build/src/ (../src from here).
    BOOST_TEST(!compile_worker_path().empty(), "no moejit-compile-worker found: compiles would stay on threads");
}

// Where the engine compiled `source` when asked for `where`, from its timing line.
std::string compiled_in(const KernelSource &source, CompileIn where) {
    struct Lines {
        std::vector<std::string> all;
        static void callback(LogLevel, const char *msg, void *user) { static_cast<Lines *>(user)->all.emplace_back(msg); }
    } lines;
    JitEngine engine(moejit::test::compile_only_jit_options("", Logger{&Lines::callback, &lines}));
    engine.get(source, where);
    for (const std::string &l : lines.all) {
        const auto at = l.find("compiled_in=");
        if (l.find("kernel timing") != std::string::npos && at != std::string::npos) return l.substr(at + 12);
    }
    return "no timing line among " + std::to_string(lines.all.size()) + " messages";
}

BOOST_AUTO_TEST_CASE(the_engine_compiles_where_it_is_asked) {
    BOOST_TEST(compiled_in(moejit::test::tiny_kernel(6, "worker_axpy"), CompileIn::worker) == "worker");
    BOOST_TEST(compiled_in(moejit::test::tiny_kernel(7, "worker_axpy"), CompileIn::process) == "process");
}

BOOST_AUTO_TEST_CASE(worker_compiles_what_the_process_compiles) {
    const KernelSource s = moejit::test::tiny_kernel(3, "worker_axpy");
    const std::vector<std::string> options = sorted_default_options();
    const CompiledKernel here = nvrtc_compile(s, "sm_90a", options);
    const std::optional<CompiledKernel> there = compile_in_worker(s, "sm_90a", options);
    BOOST_REQUIRE(there.has_value());
    BOOST_TEST(there->lowered_name == here.lowered_name);
    BOOST_TEST(there->cubin.size() == here.cubin.size());
    BOOST_TEST((there->cubin == here.cubin), "the worker's cubin differs from the process's");
    BOOST_TEST(there->worker_cpu_seconds > 0.0);
    BOOST_TEST(here.worker_cpu_seconds < 0.0);
}

BOOST_AUTO_TEST_CASE(worker_returns_nvrtcs_log_for_a_bad_source) {
    KernelSource bad = moejit::test::tiny_kernel(4, "worker_axpy");
    bad.source += "\nworker_this_is_not_cuda;\n";
    try {
        compile_in_worker(bad, "sm_90a", sorted_default_options());
        BOOST_FAIL("a source that does not compile was accepted");
    } catch (const Error &e) {
        BOOST_TEST((e.status() == Status::compile), "status " << static_cast<int>(e.status()));
        BOOST_TEST(std::string(e.what()).find("worker_this_is_not_cuda") != std::string::npos, e.what());
    }
}

BOOST_AUTO_TEST_CASE(worker_answers_its_own_version_only) {
    const KernelSource s = moejit::test::tiny_kernel(5, "worker_axpy");
    const auto ok = run_worker(request(s, MOEJIT_VERSION_STRING));
    BOOST_TEST(ok.first == 0);
    BOOST_TEST(ok.second.substr(8, 2) == "ok");
    BOOST_TEST(run_worker(request(s, "0.0.1")).first == 2);                               // another library
    BOOST_TEST(run_worker(request(s, MOEJIT_VERSION_STRING, "moejit-compile-0")).first == 2);  // another exchange
    BOOST_TEST(run_worker(request(s, MOEJIT_VERSION_STRING).substr(0, 30)).first == 2);   // cut short
    BOOST_TEST(run_worker("").first == 2);
}

BOOST_AUTO_TEST_CASE(compile_workers_variable_is_strict) {
    const char *old = std::getenv("MOEJIT_COMPILE_WORKERS");
    const std::string saved = old ? old : "";
    ::unsetenv("MOEJIT_COMPILE_WORKERS");
    BOOST_TEST(env_compile_in_processes());
    ::setenv("MOEJIT_COMPILE_WORKERS", "threads", 1);
    BOOST_TEST(!env_compile_in_processes());
    ::setenv("MOEJIT_COMPILE_WORKERS", "processes", 1);
    BOOST_TEST(env_compile_in_processes());
    ::setenv("MOEJIT_COMPILE_WORKERS", "forks", 1);
    try {
        env_compile_in_processes();
        BOOST_FAIL("MOEJIT_COMPILE_WORKERS=forks was accepted");
    } catch (const Error &e) {
        BOOST_TEST((e.status() == Status::invalid_argument));
        BOOST_TEST(std::string(e.what()).find("MOEJIT_COMPILE_WORKERS") != std::string::npos, e.what());
    }
    if (old)
        ::setenv("MOEJIT_COMPILE_WORKERS", saved.c_str(), 1);
    else
        ::unsetenv("MOEJIT_COMPILE_WORKERS");
}
