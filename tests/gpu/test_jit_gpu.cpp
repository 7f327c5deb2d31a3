// The JIT path end to end on a real device: compile, cache, load, launch, and the disk cache
// serving a fresh context with compilation switched off.
#include "gpu_main.hpp"

#include <filesystem>

#include "compile_only.hpp"
#include "runtime/context.hpp"

using namespace moejit;
using namespace moejit::test;
using moejit::test::TempDir;

namespace moejit::test {
// The test kernel's argument struct; the device source below spells the same struct.
struct ScaleArgs {
    const void *x;
    float *y;
    int n;
};
}  // namespace moejit::test
template <> inline constexpr const char *moejit::kernel_args_type<moejit::test::ScaleArgs> = "ScaleArgs";

namespace {

// A typed kernel as the library renders them: a template taking one argument struct, and its
// explicit instantiation. param_bytes_delta != 0 renders a wrong expected size.
KernelSource scale_kernel(int factor, long param_bytes_delta = 0) {
    KernelSource s;
    s.name = fmt::format("test_scale_{}", factor);
    s.template_name = "moejit_common.cuh";
    s.entry = fmt::format("scale_kernel<{}>", factor);
    s.param_bytes = sizeof(ScaleArgs) + param_bytes_delta;
    s.source = fmt::format(R"(#include "moejit_common.cuh"
struct ScaleArgs {{
    const void *x;
    float *y;
    int n;
}};
template <int F> __global__ void scale_kernel(const __grid_constant__ ScaleArgs args) {{
    long long i = moejit::global_thread_id();
    if (i < args.n) args.y[i] = float(F) * moejit::to_float(static_cast<const __nv_bfloat16 *>(args.x)[i]);
}}
template __global__ void {}(const __grid_constant__ ScaleArgs);
)", s.entry);
    return s;
}

void run_scale(Context &ctx, int factor) {
    std::mt19937_64 rng(test_seed());
    const int n = 10007;
    HalfTensor x = random_half(n, MOEJIT_DTYPE_BF16, rng);
    DeviceBuffer dx = DeviceBuffer::from(x.bits);
    DeviceBuffer dy(n * sizeof(float));
    dy.poison();
    Kernel &k = ctx.kernel(scale_kernel(factor));
    LaunchShape shape;
    shape.grid_x = (n + 255) / 256;
    shape.block_x = 256;
    ctx.launch(k, shape, nullptr, ScaleArgs{dx.as<const void>(), dy.as<float>(), n});
    std::vector<float> y = dy.download<float>();
    for (int i = 0; i < n; ++i) BOOST_REQUIRE_EQUAL(y[i], float(factor * x.values[i]));
}

}  // namespace

BOOST_AUTO_TEST_CASE(device_arch_is_detected) {
    const char *arch = nullptr;
    MOEJIT_TEST_OK(moejit_context_arch(gpu_context(), &arch));
    std::printf("device arch: %s\n", arch);
    BOOST_TEST(std::string(arch).rfind("sm_", 0) == 0u);
}

// An explicit arch whose cubins cannot load on the device is refused when the context is
// created (UNSUPPORTED, naming the arch and the device's compute capability), not when the
// first kernel fails to compile or load.
BOOST_AUTO_TEST_CASE(foreign_arch_is_refused) {
    const char *own = nullptr;
    MOEJIT_TEST_OK(moejit_context_arch(gpu_context(), &own));
    const std::string foreign = std::string(own).rfind("sm_8", 0) == 0 ? "sm_90a" : "sm_80";
    moejit_context_options_t o;
    moejit_context_options_init(&o);
    o.arch = foreign.c_str();
    moejit_context_t ctx = nullptr;
    BOOST_TEST(moejit_context_create(&o, &ctx) == MOEJIT_ERROR_UNSUPPORTED);
    BOOST_TEST(ctx == nullptr);
    const std::string message = moejit_last_error();
    BOOST_TEST(message.find(foreign) != std::string::npos, message);
    BOOST_TEST(message.find("compute capability") != std::string::npos, message);
    o.arch = own;  // the device's own arch, spelled out, is fine
    MOEJIT_TEST_OK(moejit_context_create(&o, &ctx));
    moejit_context_destroy(ctx);
}

BOOST_AUTO_TEST_CASE(compile_load_launch_and_reload_from_disk) {
    TempDir dir;
    std::string cache = dir.string();
    ContextOptions o;
    o.cache_dir = cache.c_str();
    {
        Context ctx(o);
        run_scale(ctx, 3);
        run_scale(ctx, 3);
        BOOST_TEST(ctx.jit().counters().compiles == 1u);
        BOOST_TEST(ctx.jit().counters().memory_hits == 1u);
    }
    o.config.jit_mode = JitMode::off;  // the disk entry must serve it
    Context ctx(o);
    run_scale(ctx, 3);
    BOOST_TEST(ctx.jit().counters().compiles == 0u);
    BOOST_TEST(ctx.jit().counters().disk_hits == 1u);
    BOOST_CHECK_THROW(run_scale(ctx, 5), Error);  // not cached, JIT off
}

BOOST_AUTO_TEST_CASE(zero_grid_is_a_no_op) {
    Context &ctx = internal_ctx();
    Kernel &k = ctx.kernel(scale_kernel(2));
    LaunchShape shape;
    shape.grid_x = 0;
    shape.block_x = 256;
    ctx.launch(k, shape, nullptr, ScaleArgs{nullptr, nullptr, 0});
    synchronize();
}

// The typed ABI's checks: a kernel whose parameter is not the size its source promises is not
// used (found at module load through cuFuncGetParamInfo), and a launch must pass a struct of the
// kernel's size.
BOOST_AUTO_TEST_CASE(parameter_layout_is_checked_at_load_and_launch) {
    ContextOptions o;
    o.cache_dir = "";
    Context ctx(o);
    try {
        ctx.kernel(scale_kernel(7, 8));
        BOOST_FAIL("a kernel whose parameter size differs from param_bytes was loaded");
    } catch (const Error &e) {
        BOOST_TEST((e.status() == Status::internal));
        const std::string what = e.what();
        BOOST_TEST(what.find("test_scale_7") != std::string::npos, what);
        BOOST_TEST(what.find(std::to_string(sizeof(ScaleArgs) + 8)) != std::string::npos, what);
        BOOST_TEST(what.find(std::to_string(sizeof(ScaleArgs))) != std::string::npos, what);
    }
    Kernel &k = ctx.kernel(scale_kernel(7));
    LaunchShape shape;
    shape.block_x = 32;
    static_assert(sizeof(moejit::kargs::GatherWeightsArgs) != sizeof(ScaleArgs));
    BOOST_CHECK_THROW(ctx.launch(k, shape, nullptr, moejit::kargs::GatherWeightsArgs{}), Error);
}

MOEJIT_GPU_TEST_MAIN("jit_gpu")
