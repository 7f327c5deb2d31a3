// The C ABI core on any machine: statuses, last error, version, contexts without a GPU.
#define BOOST_TEST_MODULE capi
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "moejit.h"
#include "moejit/moejit.hpp"

namespace {
std::string temp_dir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "moejit-capi-XXXXXX").string();
    return ::mkdtemp(pattern.data());
}
}  // namespace

BOOST_AUTO_TEST_CASE(status_strings_are_stable) {
    BOOST_TEST(std::string(moejit_status_string(MOEJIT_SUCCESS)) == "MOEJIT_SUCCESS");
    BOOST_TEST(std::string(moejit_status_string(MOEJIT_ERROR_NO_DRIVER)) == "MOEJIT_ERROR_NO_DRIVER");
    BOOST_TEST(std::string(moejit_status_string(MOEJIT_ERROR_JIT_DISABLED)) == "MOEJIT_ERROR_JIT_DISABLED");
    BOOST_TEST(std::string(moejit_status_string(static_cast<moejit_status_t>(999))) == "unknown status");
    // Values are ABI.
    BOOST_TEST(static_cast<int>(MOEJIT_ERROR_INVALID_ARGUMENT) == 1);
    BOOST_TEST(static_cast<int>(MOEJIT_ERROR_INTERNAL) == 10);
}

BOOST_AUTO_TEST_CASE(version_matches_header) {
    BOOST_TEST(std::string(moejit_version()) == MOEJIT_VERSION_STRING);
    BOOST_TEST(moejit_version_number() ==
               MOEJIT_VERSION_MAJOR * 10000 + MOEJIT_VERSION_MINOR * 100 + MOEJIT_VERSION_PATCH);
    int nvrtc = 0;
    BOOST_TEST(moejit_nvrtc_version(&nvrtc) == MOEJIT_SUCCESS);
    BOOST_TEST(nvrtc >= 1100);
}

BOOST_AUTO_TEST_CASE(null_arguments_name_themselves) {
    BOOST_TEST(moejit_context_create(nullptr, nullptr) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(std::string(moejit_last_error()).find("context") != std::string::npos);
    BOOST_TEST(moejit_context_options_init(nullptr) == MOEJIT_ERROR_INVALID_ARGUMENT);
    const char *arch = nullptr;
    BOOST_TEST(moejit_context_arch(nullptr, &arch) == MOEJIT_ERROR_INVALID_ARGUMENT);
    moejit_context_destroy(nullptr);  // a no-op
    moejit_plan_destroy(nullptr);
}

// A newer header's struct (larger struct_size) is accepted only while every field this library
// does not know is zero (its default); the caller's buffer really is that large here.
BOOST_AUTO_TEST_CASE(struct_size_from_a_newer_header_needs_a_zero_tail) {
    struct {
        moejit_context_options_t options;
        unsigned char newer_fields[8];
    } newer{};
    BOOST_TEST(moejit_context_options_init_sized(&newer.options, sizeof newer) == MOEJIT_SUCCESS);
    BOOST_TEST(newer.options.struct_size == sizeof newer);
    newer.options.compile_only = 1;
    newer.options.arch = "sm_90a";
    newer.options.cache_dir = "";
    moejit_context_t context = nullptr;
    BOOST_TEST(moejit_context_create(&newer.options, &context) == MOEJIT_SUCCESS);
    moejit_context_destroy(context);
    context = nullptr;
    newer.newer_fields[3] = 1;
    BOOST_TEST(moejit_context_create(&newer.options, &context) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(context == nullptr);
    BOOST_TEST(std::string(moejit_last_error()).find("options->struct_size") != std::string::npos);
}

// `init` (a *_init macro) on a struct followed by a 0xA5 guard: it sets struct_size to the
// caller's sizeof and writes nothing past it.
template <class T, class Init> void expect_init_writes_its_sizeof(Init init) {
    unsigned char buf[sizeof(T) + 32];
    std::memset(buf, 0xA5, sizeof buf);
    auto *args = reinterpret_cast<T *>(buf);
    BOOST_TEST(init(args) == MOEJIT_SUCCESS);
    BOOST_TEST(args->struct_size == sizeof(T));
    for (std::size_t i = sizeof(T); i < sizeof buf; ++i) BOOST_TEST(buf[i] == 0xA5);
}

// The C++ wrappers go through the *_init macros, so they get the caller's sizeof too.
BOOST_AUTO_TEST_CASE(init_macro_passes_the_callers_size) {
    expect_init_writes_its_sizeof<moejit_backward_args_t>([](auto *a) { return moejit_backward_args_init(a); });
    moejit_backward_args_t args_storage;
    auto *args = &args_storage;
    // The unsized exported function (binaries built against 0.1-0.3) is still there.
    moejit_status_t (*legacy)(moejit_backward_args_t *) = &moejit_backward_args_init;
    BOOST_TEST(legacy(args) == MOEJIT_SUCCESS);
}

BOOST_AUTO_TEST_CASE(compile_only_context_needs_no_gpu) {
    std::string dir = temp_dir();
    moejit_context_options_t options;
    moejit_context_options_init(&options);
    options.compile_only = 1;
    moejit_context_t context = nullptr;
    BOOST_TEST(moejit_context_create(&options, &context) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(std::string(moejit_last_error()).find("arch") != std::string::npos);
    options.arch = "sm_75";
    BOOST_TEST(moejit_context_create(&options, &context) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(std::string(moejit_last_error()).find("sm_75") != std::string::npos);
    options.arch = "sm_90a";
    options.cache_dir = dir.c_str();
    BOOST_TEST(moejit_context_create(&options, &context) == MOEJIT_SUCCESS);
    const char *arch = nullptr;
    BOOST_TEST(moejit_context_arch(context, &arch) == MOEJIT_SUCCESS);
    BOOST_TEST(std::string(arch) == "sm_90a");
    const char *cache = nullptr;
    BOOST_TEST(moejit_context_cache_dir(context, &cache) == MOEJIT_SUCCESS);
    BOOST_TEST(std::string(cache) == dir + "/" + MOEJIT_VERSION_STRING);
    moejit_cache_stats_t stats;
    moejit_cache_stats_init(&stats);
    BOOST_TEST(moejit_context_cache_stats(context, &stats) == MOEJIT_SUCCESS);
    BOOST_TEST(stats.compiles == 0u);
    moejit_context_destroy(context);
    std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(bad_jit_mode_is_rejected) {
    moejit_context_options_t options;
    moejit_context_options_init(&options);
    options.compile_only = 1;
    options.arch = "sm_80";
    options.jit_mode = 7;
    moejit_context_t context = nullptr;
    BOOST_TEST(moejit_context_create(&options, &context) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(std::string(moejit_last_error()).find("jit_mode") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(missing_driver_is_a_status) {
    // In a child process, so the driver table (loaded once per process) sees the override even
    // on a GPU host: the no-driver path must be testable everywhere.
    pid_t pid = ::fork();
    BOOST_REQUIRE(pid >= 0);
    if (pid == 0) {
        ::setenv("MOEJIT_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
        moejit_context_t context = nullptr;
        moejit_status_t s = moejit_context_create(nullptr, &context);
        bool ok = s == MOEJIT_ERROR_NO_DRIVER && context == nullptr &&
                  std::strstr(moejit_last_error(), "libcuda") != nullptr;
        ::_exit(ok ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    BOOST_TEST((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

BOOST_AUTO_TEST_CASE(no_gpu_here_gives_no_driver_or_no_device) {
    // On the CI machine (no driver) this is NO_DRIVER; on a GPU host it succeeds.
    moejit_context_t context = nullptr;
    moejit_status_t s = moejit_context_create(nullptr, &context);
    BOOST_TEST((s == MOEJIT_SUCCESS || s == MOEJIT_ERROR_NO_DRIVER || s == MOEJIT_ERROR_NO_DEVICE));
    if (s != MOEJIT_SUCCESS) BOOST_TEST(std::strlen(moejit_last_error()) > 0u);
    moejit_context_destroy(context);
}

BOOST_AUTO_TEST_CASE(cpp_wrapper_throws_with_status) {
    moejit_context_options_t options;
    moejit_context_options_init(&options);
    options.compile_only = 1;  // no arch: invalid
    try {
        moejit::api::Context context(&options);
        BOOST_FAIL("expected an exception");
    } catch (const moejit::api::Exception &e) {
        BOOST_TEST(e.status() == MOEJIT_ERROR_INVALID_ARGUMENT);
    }
}

// The pre-dispatched experts entry's argument structs follow the ABI rules of every other
// (struct_size read before the handle, so these hold without a device).
BOOST_AUTO_TEST_CASE(experts_entry_arguments_are_checked_without_a_device) {
    expect_init_writes_its_sizeof<moejit_experts_backward_args_t>(
        [](auto *a) { return moejit_experts_backward_args_init(a); });

    moejit_experts_forward_args_t fwd;
    BOOST_TEST(moejit_experts_forward_args_init(&fwd) == MOEJIT_SUCCESS);
    BOOST_TEST(moejit_plan_experts_forward(nullptr, &fwd) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(std::string(moejit_last_error()).find("plan is NULL") != std::string::npos);
    fwd.struct_size = 12;
    BOOST_TEST(moejit_plan_experts_forward(nullptr, &fwd) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(std::string(moejit_last_error()).find("args->struct_size") != std::string::npos);
    BOOST_TEST(moejit_plan_experts_backward(nullptr, nullptr) == MOEJIT_ERROR_INVALID_ARGUMENT);
    std::size_t bytes = 1;
    BOOST_TEST(moejit_plan_experts_saved_size(nullptr, 16, &bytes) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(moejit_plan_experts_workspace_size(nullptr, 16, &bytes) == MOEJIT_ERROR_INVALID_ARGUMENT);
    BOOST_TEST(std::string(moejit_last_error()).find("plan is NULL") != std::string::npos);
}
