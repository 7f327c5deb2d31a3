// A plan's launch path: once the plan exists, forward and backward neither look a kernel up
// (no render, hash or cache lock: the context's cache counters do not move) nor allocate on
// the heap (counted by replacing the global operator new in this executable, which links the
// library's core statically); and plans created by several threads at once, each compiling its
// own kernels, all work. The numbers (host time per forward + backward) are printed for the log.
#include "gpu_main.hpp"
#include "int32_layer_desc.hpp"
#include "layer_args.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <random>
#include <thread>
#include <vector>

// The replacements below pair malloc with free; GCC cannot see that through inlining.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
}  // namespace

void *operator new(std::size_t n) {
    if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
    if (void *p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }

MOEJIT_GPU_TEST_MAIN("plan_launch_gpu")

using namespace moejit::test;

namespace {

// One layer's buffers on the device, inputs random, for a plan of `desc` and T tokens.
struct LayerBuffers {
    DeviceBuffer x, sel, rw, wg, wu, wgu, wd, out, dout, dx, drw, dwg, dwu, dwgu, dwd, saved, workspace;
    std::size_t saved_size = 0, workspace_size = 0;

    LayerBuffers(moejit_plan_t plan, const moejit_plan_desc_t &d, std::int64_t T, std::mt19937_64 &rng) {
        const std::size_t H = d.hidden_size, I = d.intermediate_size, E = d.num_experts, k = d.top_k;
        auto half = [&](std::size_t n) { return DeviceBuffer::from(random_half(n, d.dtype, rng, 0.05).bits); };
        x = half(T * H);
        dout = half(T * H);
        wg = half(E * I * H);
        wu = half(E * I * H);
        wgu = half(E * 2 * I * H);
        wd = half(E * H * I);
        std::vector<std::int32_t> s(T * k);
        std::uniform_int_distribution<std::int32_t> expert(0, d.num_experts - 1);
        for (auto &v : s) v = expert(rng);
        sel = DeviceBuffer::from(s);
        std::vector<float> w(T * k, 0.5f);
        rw = DeviceBuffer::from(w);
        out = DeviceBuffer(T * H * 2);
        dx = DeviceBuffer(T * H * 2);
        drw = DeviceBuffer(T * k * 4);
        dwg = DeviceBuffer(E * I * H * 4);
        dwu = DeviceBuffer(E * I * H * 4);
        dwgu = DeviceBuffer(E * 2 * I * H * 4);
        dwd = DeviceBuffer(E * H * I * 4);
        MOEJIT_TEST_OK(moejit_plan_saved_size(plan, T, &saved_size));
        MOEJIT_TEST_OK(moejit_plan_workspace_size(plan, T, &workspace_size));
        saved = DeviceBuffer(saved_size);
        workspace = DeviceBuffer(workspace_size);
    }

    void step(moejit_plan_t plan, const moejit_plan_desc_t &d, std::int64_t T) {
        const bool merged = d.fc1_layout == MOEJIT_FC1_MERGED;
        moejit_forward_args_t f;
        moejit_forward_args_init(&f);
        f.num_tokens = T;
        f.x = x.get();
        f.selected_experts = sel.get();
        f.routing_weights = rw.get();
        f.w_gate = merged ? nullptr : wg.get(), f.w_up = merged ? nullptr : wu.get();
        f.w_gate_up = merged ? wgu.get() : nullptr, f.w_down = wd.get();
        f.out = out.get();
        f.saved = saved.get(), f.saved_size = saved_size;
        f.workspace = workspace.get(), f.workspace_size = workspace_size;
        MOEJIT_TEST_OK(moejit_plan_forward(plan, &f));
        moejit_backward_args_t b;
        layer_backward_args(&f, &b);
        b.dout = dout.get();
        b.dx = dx.get();
        b.d_routing_weights = drw.get();
        b.dw_gate = merged ? nullptr : dwg.get(), b.dw_up = merged ? nullptr : dwu.get();
        b.dw_gate_up = merged ? dwgu.get() : nullptr, b.dw_down = dwd.get();
        MOEJIT_TEST_OK(moejit_plan_backward(plan, &b));
    }
};

moejit_plan_desc_t layer_desc(std::int32_t H, std::int32_t I, std::int32_t E, std::int32_t k, bool merged) {
    return moejit::test::int32_layer_desc(H, I, E, k, merged);
}

moejit_cache_stats_t stats() {
    moejit_cache_stats_t s;
    moejit_cache_stats_init(&s);
    MOEJIT_TEST_OK(moejit_context_cache_stats(gpu_context(), &s));
    return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(launch_path_neither_looks_up_nor_allocates) {
    std::mt19937_64 rng(test_seed());
    for (bool merged : {false, true}) {
        const moejit_plan_desc_t d = layer_desc(2048, 768, 128, 8, merged);  // qwen3-30b-a3b's layer
        moejit_plan_t plan = nullptr;
        MOEJIT_TEST_OK(moejit_plan_create(gpu_context(), &d, &plan));
        const std::int64_t T = 512;
        LayerBuffers buffers(plan, d, T, rng);
        buffers.step(plan, d, T);  // first call: nothing left to resolve, but warm the driver
        synchronize();

        const moejit_cache_stats_t before = stats();
        allocations = 0;
        constexpr int kSteps = 20;
        const auto start = std::chrono::steady_clock::now();
        counting = true;
        for (int i = 0; i < kSteps; ++i) buffers.step(plan, d, T);
        counting = false;
        const double host_us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / kSteps;
        synchronize();
        const moejit_cache_stats_t after = stats();
        std::printf("plan_launch_gpu: %s T=%lld: host time per forward+backward %.1f us (launch calls only, "
                    "kernels queued), heap allocations %ld, cache lookups %llu\n",
                    merged ? "merged" : "split", static_cast<long long>(T), host_us, allocations.load(),
                    static_cast<unsigned long long>(after.memory_hits - before.memory_hits));
        BOOST_TEST(after.memory_hits == before.memory_hits);
        BOOST_TEST(after.disk_hits == before.disk_hits);
        BOOST_TEST(after.misses == before.misses);
        BOOST_TEST(allocations.load() == 0);
        moejit_plan_destroy(plan);
    }
}

BOOST_AUTO_TEST_CASE(plans_created_concurrently_on_one_context) {
    // Several threads create plans of different shapes on one context at once (each compiling
    // or loading its own kernels, some shared), then each runs a step: no deadlock, every plan
    // works.
    const std::vector<moejit_plan_desc_t> descs = {layer_desc(512, 256, 8, 2, false), layer_desc(512, 256, 8, 2, true),
                                                   layer_desc(1024, 512, 16, 4, false),
                                                   layer_desc(768, 384, 12, 3, true)};
    std::vector<moejit_plan_t> plans(descs.size(), nullptr);
    std::vector<moejit_status_t> status(descs.size(), MOEJIT_ERROR_INTERNAL);
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < descs.size(); ++i)
        threads.emplace_back([&, i] { status[i] = moejit_plan_create(gpu_context(), &descs[i], &plans[i]); });
    for (std::thread &t : threads) t.join();
    std::mt19937_64 rng(test_seed() + 1);
    for (std::size_t i = 0; i < descs.size(); ++i) {
        BOOST_TEST_REQUIRE(status[i] == MOEJIT_SUCCESS);
        LayerBuffers buffers(plans[i], descs[i], 64, rng);
        buffers.step(plans[i], descs[i], 64);
        synchronize();
        const std::vector<std::uint16_t> out = buffers.out.download<std::uint16_t>();
        std::vector<double> values = half_to_double(out, descs[i].dtype);
        BOOST_TEST(all_finite(values));
        moejit_plan_destroy(plans[i]);
    }
}

// A plan reports the configuration it resolved (moejit_plan_describe): the same text as
// moejit_plan_describe_desc for its context and descriptor, following the context's options.
BOOST_AUTO_TEST_CASE(plan_describes_its_configuration) {
    auto text = [](auto &&call) {
        std::size_t need = 0;
        MOEJIT_TEST_OK(call(nullptr, 0, &need));
        std::string s(need, '\0');
        MOEJIT_TEST_OK(call(s.data(), s.size(), &need));
        s.resize(need - 1);
        return s;
    };
    const moejit_plan_desc_t d = layer_desc(512, 256, 8, 2, false);
    moejit_context_options_t o;
    MOEJIT_TEST_OK(moejit_context_options_init(&o));
    o.gather = MOEJIT_SWITCH_OFF;
    o.fuse_swiglu = MOEJIT_SWITCH_ON;
    moejit_context_t ctx = nullptr;
    MOEJIT_TEST_OK(moejit_context_create(&o, &ctx));
    moejit_plan_t plan = nullptr;
    MOEJIT_TEST_OK(moejit_plan_create(ctx, &d, &plan));
    const std::string plan_text =
        text([&](char *b, std::size_t n, std::size_t *r) { return moejit_plan_describe(plan, b, n, r); });
    const std::string desc_text =
        text([&](char *b, std::size_t n, std::size_t *r) { return moejit_plan_describe_desc(ctx, &d, b, n, r); });
    std::printf("plan_launch_gpu: plan with gather off, fuse_swiglu on:\n%s", plan_text.c_str());
    BOOST_TEST(plan_text == desc_text);
    BOOST_TEST(plan_text.find("gather=off\ngather_from=option\n") != std::string::npos);
    const char *arch = nullptr;
    MOEJIT_TEST_OK(moejit_context_arch(ctx, &arch));
    if (std::string(arch) == "sm_90a")  // the epilogue exists on the wgmma engine only
        BOOST_TEST(plan_text.find("fuse_swiglu=on\nfuse_swiglu_from=option\n") != std::string::npos);
    std::mt19937_64 rng(test_seed() + 2);
    LayerBuffers buffers(plan, d, 64, rng);
    buffers.step(plan, d, 64);
    synchronize();
    BOOST_TEST(all_finite(half_to_double(buffers.out.download<std::uint16_t>(), d.dtype)));
    moejit_plan_destroy(plan);
    moejit_context_destroy(ctx);
}
