// Routing index, scatter, gather and the per-route weight kernels on a real device, through the
// C ABI, against the CPU reference: exact for the index, scatter and the weight kernels; for
// gather both the float64 relative error and a bitwise match with an fp32 host emulation of the
// documented order (fma in j order). Every output (and the routing workspace) is poisoned with
// NaN / -1 first; every case also runs twice and must be bitwise identical.
#include "gpu_main.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/context.hpp"
#include "ops/routing.hpp"
#include "ops/scatter_gather.hpp"
#include "reference_routing.hpp"

using namespace moejit::test;
namespace reference = moejit::reference;

namespace {

template <class Id> constexpr moejit_dtype_t id_dtype() {
    return sizeof(Id) == 8 ? MOEJIT_DTYPE_INT64 : MOEJIT_DTYPE_INT32;
}

struct RoutingResult {
    std::vector<std::int32_t> counts, offsets, scatter_index;
    bool operator==(const RoutingResult &o) const {
        return counts == o.counts && offsets == o.offsets && scatter_index == o.scatter_index;
    }
};

// One routing index on the device: the routes `sel` [t,k] over e experts, the outputs and the
// workspace, every output and the workspace poisoned.
struct RoutingBuffers {
    moejit_dtype_t dtype;
    std::int64_t t;
    std::int32_t k, e;
    DeviceBuffer sel, counts, offsets, index, ws;
    size_t ws_bytes = 0;

    template <class Id>
    RoutingBuffers(const std::vector<Id> &routes, std::int64_t t_, std::int32_t k_, std::int32_t e_)
        : dtype(id_dtype<Id>()), t(t_), k(k_), e(e_) {
        MOEJIT_TEST_OK(moejit_routing_index_workspace_size(t, k, e, &ws_bytes));
        sel = DeviceBuffer::from(routes);
        counts = DeviceBuffer(e * sizeof(std::int32_t));
        offsets = DeviceBuffer((e + 1) * sizeof(std::int32_t));
        index = DeviceBuffer(routes.size() * sizeof(std::int32_t));
        ws = DeviceBuffer(ws_bytes);
        for (DeviceBuffer *b : {&counts, &offsets, &index, &ws}) b->poison();
    }
    // Through the C ABI.
    moejit_status_t run(void *stream) const {
        return moejit_routing_index(gpu_context(), dtype, sel.get(), t, k, e, counts.as<std::int32_t>(),
                                    offsets.as<std::int32_t>(), index.as<std::int32_t>(), ws.get(), ws_bytes,
                                    stream);
    }
    // The library's own entry, for kernels loaded once (the layer plan's path).
    moejit::RoutingIndexArgs internal_args() const {
        moejit::RoutingIndexArgs a;
        a.index_dtype = static_cast<moejit::DType>(dtype);  // the same values (capi static_asserts them)
        a.selected_experts = sel.get();
        a.num_tokens = t, a.top_k = k, a.num_experts = e;
        a.counts = counts.as<std::int32_t>();
        a.offsets = offsets.as<std::int32_t>();
        a.scatter_index = index.as<std::int32_t>();
        a.workspace = ws.get(), a.workspace_size = ws_bytes;
        return a;
    }
    RoutingResult download() const {
        return {counts.download<std::int32_t>(), offsets.download<std::int32_t>(), index.download<std::int32_t>()};
    }
};

// One routing_index call on `stream` with every output and the workspace poisoned first.
template <class Id>
RoutingResult run_routing(const std::vector<Id> &sel, std::int64_t t, std::int32_t k,
                          std::int32_t e, void *stream = nullptr) {
    const RoutingBuffers b(sel, t, k, e);
    MOEJIT_TEST_OK(b.run(stream));
    if (stream) MOEJIT_CU(cuStreamSynchronize(static_cast<CUstream>(stream)));
    return b.download();
}

template <class Id>
void check_routing(const std::vector<Id> &sel, std::int64_t t, std::int32_t k, std::int32_t e,
                   const std::string &what) {
    BOOST_TEST_CONTEXT(what << " (T=" << t << ", k=" << k << ", E=" << e << ", "
                            << (sizeof(Id) == 8 ? "int64" : "int32") << ")") {
        const reference::RoutingIndex ref = reference::routing_index(sel, t, k, e);
        const RoutingResult a = run_routing(sel, t, k, e);
        BOOST_TEST(a.counts == ref.counts, boost::test_tools::per_element());
        BOOST_TEST(a.offsets == ref.offsets, boost::test_tools::per_element());
        BOOST_REQUIRE_EQUAL(a.scatter_index.size(), ref.scatter_index.size());
        std::size_t wrong = 0;
        for (std::size_t p = 0; p < ref.scatter_index.size(); ++p)
            if (a.scatter_index[p] != ref.scatter_index[p] && wrong++ < 5)
                BOOST_ERROR("scatter_index[" << p << "] = " << a.scatter_index[p] << ", expected "
                                             << ref.scatter_index[p]);
        BOOST_TEST(wrong == 0u);
        const RoutingResult b = run_routing(sel, t, k, e);
        BOOST_TEST((a == b), "two runs differ");
    }
}

// Uniform ids with replacement (duplicate routes happen).
template <class Id>
std::vector<Id> random_routes(std::int64_t t, std::int32_t k, std::int32_t e, std::mt19937_64 &rng) {
    std::uniform_int_distribution<std::int32_t> dist(0, e - 1);
    std::vector<Id> sel(static_cast<std::size_t>(t * k));
    for (auto &s : sel) s = static_cast<Id>(dist(rng));
    return sel;
}

// k distinct experts per token (a top-k of random logits).
template <class Id>
std::vector<Id> topk_routes(std::int64_t t, std::int32_t k, std::int32_t e, std::mt19937_64 &rng) {
    std::vector<Id> sel;
    sel.reserve(static_cast<std::size_t>(t * k));
    std::vector<std::int32_t> perm(e);
    for (std::int64_t i = 0; i < t; ++i) {
        std::iota(perm.begin(), perm.end(), 0);
        for (std::int32_t j = 0; j < k; ++j) {
            std::uniform_int_distribution<std::int32_t> pick(j, e - 1);
            std::swap(perm[j], perm[pick(rng)]);
            sel.push_back(static_cast<Id>(perm[j]));
        }
    }
    return sel;
}

template <class Id> void routing_suite(std::mt19937_64 &rng) {
    struct Shape {
        std::int64_t t;
        std::int32_t k, e;
    };
    for (const Shape &s : {Shape{1, 1, 1}, Shape{1, 8, 256}, Shape{7, 2, 8}, Shape{1000, 2, 8},
                           Shape{1000, 8, 128}, Shape{4096, 8, 256}, Shape{32768, 8, 256},
                           Shape{3000, 4, 384}, Shape{5000, 2, 4096}, Shape{9000, 3, 8192},
                           Shape{20000, 6, 1536}})
        check_routing(random_routes<Id>(s.t, s.k, s.e, rng), s.t, s.k, s.e, "random with duplicates");
    for (const Shape &s : {Shape{1, 8, 8}, Shape{777, 8, 64}, Shape{16384, 8, 128}, Shape{8192, 8, 256}})
        check_routing(topk_routes<Id>(s.t, s.k, s.e, rng), s.t, s.k, s.e, "distinct top-k");

    // Every route to expert 0 (one expert owns all S rows; the rank must be stable across chunks).
    for (const Shape &s : {Shape{128, 2, 8}, Shape{32768, 8, 256}, Shape{3, 4, 1}})
        check_routing(std::vector<Id>(static_cast<std::size_t>(s.t * s.k), Id(0)), s.t, s.k, s.e,
                      "all routes to expert 0");
    // Every route to the last expert.
    check_routing(std::vector<Id>(4096 * 4, Id(63)), 4096, 4, 64, "all routes to expert E-1");
    // Empty experts: only even experts, and a skewed (geometric) choice.
    {
        auto sel = random_routes<Id>(5000, 4, 32, rng);
        for (auto &v : sel) v = static_cast<Id>((v / 2) * 2);
        check_routing(sel, 5000, 4, 64, "only even experts (empty odd ones)");
        std::geometric_distribution<std::int32_t> geo(0.3);
        std::vector<Id> skew(20000 * 8);
        for (auto &v : skew) v = static_cast<Id>(std::min(geo(rng), 255));
        check_routing(skew, 20000, 8, 256, "skewed");
    }
    // k = E: every token routes to every expert, in random order.
    check_routing(topk_routes<Id>(999, 8, 8, rng), 999, 8, 8, "k = E");
    // E = 1.
    check_routing(std::vector<Id>(513, Id(0)), 513, 1, 1, "E = 1");
    // T = 1 and T = 0.
    check_routing(random_routes<Id>(1, 4, 16, rng), 1, 4, 16, "T = 1");
    check_routing(std::vector<Id>{}, 0, 4, 16, "T = 0");
    check_routing(std::vector<Id>{}, 0, 8, 8192, "T = 0, E = 8192");
}

}  // namespace

// ------------------------------------------------------------------ routing index

BOOST_AUTO_TEST_CASE(routing_index_int32) {
    gpu_context();  // makes the device context current before any allocation
    std::mt19937_64 rng(test_seed());
    routing_suite<std::int32_t>(rng);
}

BOOST_AUTO_TEST_CASE(routing_index_int64) {
    gpu_context();  // makes the device context current before any allocation
    std::mt19937_64 rng(test_seed() + 1);
    routing_suite<std::int64_t>(rng);
}

BOOST_AUTO_TEST_CASE(routing_index_drops_out_of_range_ids) {
    gpu_context();  // makes the device context current before any allocation
    std::mt19937_64 rng(test_seed() + 2);
    // int64 ids beyond int32 must not alias a valid expert after truncation.
    auto sel64 = random_routes<std::int64_t>(3000, 4, 16, rng);
    for (std::size_t p = 0; p < sel64.size(); p += 7) sel64[p] = -1;
    for (std::size_t p = 3; p < sel64.size(); p += 11) sel64[p] = 16;
    for (std::size_t p = 5; p < sel64.size(); p += 13) sel64[p] = (std::int64_t{1} << 32) + 3;
    check_routing(sel64, 3000, 4, 16, "int64 with dropped ids");
    auto sel32 = random_routes<std::int32_t>(3000, 4, 16, rng);
    for (std::size_t p = 0; p < sel32.size(); p += 5) sel32[p] = (p % 2) ? -7 : 1 << 30;
    check_routing(sel32, 3000, 4, 16, "int32 with dropped ids");
    const reference::RoutingIndex ref = reference::routing_index(sel32, 3000, 4, 16);
    BOOST_TEST(ref.offsets.back() < 3000 * 4);  // the case really drops routes
}

BOOST_AUTO_TEST_CASE(routing_index_is_cuda_graph_capturable) {
    gpu_context();  // makes the device context current before any allocation
    std::mt19937_64 rng(test_seed() + 3);
    const std::int64_t t = 4096;
    const std::int32_t k = 8, e = 128;
    const auto sel = random_routes<std::int32_t>(t, k, e, rng);
    const reference::RoutingIndex ref = reference::routing_index(sel, t, k, e);

    CUstream stream = nullptr;
    MOEJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    run_routing(sel, t, k, e, stream);  // compiles and loads outside the capture

    const RoutingBuffers b(sel, t, k, e);
    CapturedGraph(stream, CU_STREAM_CAPTURE_MODE_RELAXED, [&] { return b.run(stream); }).launch_and_wait();
    const RoutingResult got = b.download();
    BOOST_TEST(got.counts == ref.counts, boost::test_tools::per_element());
    BOOST_TEST(got.offsets == ref.offsets, boost::test_tools::per_element());
    BOOST_TEST((got.scatter_index == ref.scatter_index));
    MOEJIT_CU(cuStreamDestroy(stream));
}

BOOST_AUTO_TEST_CASE(routing_index_timing) {
    gpu_context();  // makes the device context current before any allocation
    // Reported, not asserted: the scale target is S = 262144 routes over 256 experts.
    std::mt19937_64 rng(test_seed() + 4);
    struct Shape {
        std::int64_t t;
        std::int32_t k, e;
        bool all_zero;
    };
    for (const Shape &s : {Shape{32768, 8, 256, false}, Shape{32768, 8, 256, true},
                           Shape{16384, 8, 128, false}, Shape{4096, 8, 128, false}}) {
        const auto sel = s.all_zero ? std::vector<std::int32_t>(s.t * s.k, 0)
                                    : topk_routes<std::int32_t>(s.t, s.k, s.e, rng);
        const RoutingBuffers b(sel, s.t, s.k, s.e);
        auto once = [&] { MOEJIT_TEST_OK(b.run(nullptr)); };
        once();
        synchronize();
        // Eager calls (includes host work: render, cache lookup, 3 launches) and the same call
        // replayed from a CUDA graph of `per_graph` calls (device time of the 3 kernels).
        const int per_graph = 20;
        CUstream stream = nullptr;
        MOEJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
        const CapturedGraph graph(stream, CU_STREAM_CAPTURE_MODE_RELAXED, [&] {
            moejit_status_t captured = MOEJIT_SUCCESS;
            for (int i = 0; i < per_graph && captured == MOEJIT_SUCCESS; ++i) captured = b.run(stream);
            return captured;
        });
        graph.launch_and_wait();

        CUevent start = nullptr, stop = nullptr;
        MOEJIT_CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
        MOEJIT_CU(cuEventCreate(&stop, CU_EVENT_DEFAULT));
        const int reps = 50;
        float ms = 0, graph_ms = 0;
        MOEJIT_CU(cuEventRecord(start, nullptr));
        for (int i = 0; i < reps; ++i) once();
        MOEJIT_CU(cuEventRecord(stop, nullptr));
        MOEJIT_CU(cuEventSynchronize(stop));
        MOEJIT_CU(cuEventElapsedTime(&ms, start, stop));
        // The layer plan's path: kernels fetched once, no render or cache lookup per call.
        moejit::Context &ctx = internal_ctx();
        const moejit::LoadedRoutingKernels loaded =
            moejit::load_routing_index(ctx, moejit::RoutingSpec{moejit::DType::int32, s.e});
        const moejit::RoutingIndexArgs args = b.internal_args();
        float preloaded_ms = 0;
        MOEJIT_CU(cuEventRecord(start, nullptr));
        for (int i = 0; i < reps; ++i) moejit::routing_index(ctx, args, loaded);
        MOEJIT_CU(cuEventRecord(stop, nullptr));
        MOEJIT_CU(cuEventSynchronize(stop));
        MOEJIT_CU(cuEventElapsedTime(&preloaded_ms, start, stop));
        MOEJIT_CU(cuEventRecord(start, stream));
        for (int i = 0; i < reps; ++i) graph.launch();
        MOEJIT_CU(cuEventRecord(stop, stream));
        MOEJIT_CU(cuEventSynchronize(stop));
        MOEJIT_CU(cuEventElapsedTime(&graph_ms, start, stop));
        std::printf("routing_index T=%lld k=%d E=%d%s: %.2f us per eager call (C ABI), %.2f us "
                    "preloaded, %.2f us per graph replay (3 kernels)\n",
                    static_cast<long long>(s.t), s.k, s.e, s.all_zero ? " all->0" : "",
                    1000.0 * ms / reps, 1000.0 * preloaded_ms / reps,
                    1000.0 * graph_ms / (reps * per_graph));
        MOEJIT_CU(cuEventDestroy(start));
        MOEJIT_CU(cuEventDestroy(stop));
        MOEJIT_CU(cuStreamDestroy(stream));
        BOOST_TEST(graph_ms > 0.0f);
    }
}

// ------------------------------------------------------------------ scatter and gather

namespace {

std::vector<double> weights_as_double(const std::vector<std::uint16_t> &bits,
                                      const std::vector<float> &fp32, moejit_dtype_t w) {
    if (w == MOEJIT_DTYPE_FP32) return {fp32.begin(), fp32.end()};
    return half_to_double(bits, w);
}

enum class Routes { random, dropped, all_to_zero };  // dropped: every third id is -1

struct SgCase {
    moejit_dtype_t dtype;
    std::int64_t t;
    std::int32_t k, e;
    std::int64_t h;
    Routes routes;
};

void check_scatter_gather(const SgCase &c, std::mt19937_64 &rng) {
    const std::int64_t rows = c.t * c.k;
    const auto h = static_cast<std::size_t>(c.h);
    BOOST_TEST_CONTEXT("dtype " << (c.dtype == MOEJIT_DTYPE_BF16 ? "bf16" : "fp16") << ", T="
                                << c.t << ", k=" << c.k << ", E=" << c.e << ", H=" << c.h
                                << (c.routes == Routes::dropped       ? ", dropped routes"
                                    : c.routes == Routes::all_to_zero ? ", all routes to expert 0"
                                                                      : "")) {
        // Routing through the library (checked above), compared with the reference once more.
        auto sel = random_routes<std::int32_t>(c.t, c.k, c.e, rng);
        if (c.routes == Routes::dropped)
            for (std::size_t p = 1; p < sel.size(); p += 3) sel[p] = -1;
        if (c.routes == Routes::all_to_zero) std::fill(sel.begin(), sel.end(), 0);
        const reference::RoutingIndex ref = reference::routing_index(sel, c.t, c.k, c.e);
        const RoutingResult routing = run_routing(sel, c.t, c.k, c.e);
        BOOST_REQUIRE((routing.scatter_index == ref.scatter_index));
        const std::vector<std::int32_t> &idx = ref.scatter_index;
        DeviceBuffer d_idx = DeviceBuffer::from(idx);

        // ---- scatter: exact, and rows no route owns stay poisoned
        const HalfTensor x = random_half(static_cast<std::size_t>(c.t) * h, c.dtype, rng);
        DeviceBuffer d_x = DeviceBuffer::from(x.bits);
        DeviceBuffer d_xs(static_cast<std::size_t>(rows) * h * 2);
        std::vector<std::uint16_t> xs_expected(static_cast<std::size_t>(rows) * h, 0xFFFF);
        for (std::int64_t p = 0; p < rows; ++p)
            if (idx[p] >= 0)
                std::copy_n(x.bits.begin() + (p / c.k) * h, h, xs_expected.begin() + idx[p] * h);
        std::vector<std::uint16_t> xs_first;
        for (int run = 0; run < 2; ++run) {
            d_xs.poison();
            MOEJIT_TEST_OK(moejit_scatter(gpu_context(), c.dtype, d_x.get(), d_idx.as<std::int32_t>(),
                                          c.t, c.k, c.h, d_xs.get(), nullptr));
            const auto xs = d_xs.download<std::uint16_t>();
            if (run == 0) {
                xs_first = xs;
                BOOST_TEST((xs == xs_expected), "scatter differs from the reference");
            } else {
                BOOST_TEST((xs == xs_first), "scatter: two runs differ");
            }
        }
        if (c.routes != Routes::dropped)  // every row written: no poison left
            BOOST_TEST(std::none_of(xs_first.begin(), xs_first.end(),
                                    [](std::uint16_t b) { return b == 0xFFFF; }));

        // ---- gather: ys random [S,H] (finite everywhere, also in rows nobody owns)
        const HalfTensor ys = random_half(static_cast<std::size_t>(rows) * h, c.dtype, rng);
        DeviceBuffer d_ys = DeviceBuffer::from(ys.bits);
        const HalfTensor w_half = random_half(static_cast<std::size_t>(rows), c.dtype, rng, 0.5f);
        std::vector<float> w_fp32(static_cast<std::size_t>(rows));
        std::normal_distribution<float> wd(0.0f, 0.5f);
        for (auto &v : w_fp32) v = wd(rng);
        DeviceBuffer d_w_half = DeviceBuffer::from(w_half.bits), d_w_fp32 = DeviceBuffer::from(w_fp32);
        DeviceBuffer d_out(static_cast<std::size_t>(c.t) * h * 2);

        for (const moejit_dtype_t wdt : {static_cast<moejit_dtype_t>(0), c.dtype, MOEJIT_DTYPE_FP32}) {
            const bool weighted = wdt != 0;
            const void *d_w = !weighted ? nullptr
                              : wdt == MOEJIT_DTYPE_FP32 ? d_w_fp32.get() : d_w_half.get();
            const std::vector<double> w64 =
                weighted ? weights_as_double(w_half.bits, w_fp32, wdt) : std::vector<double>{};
            BOOST_TEST_CONTEXT("weights " << (!weighted ? "none"
                                              : wdt == MOEJIT_DTYPE_FP32 ? "fp32" : "dtype")) {
                const std::vector<double> ref_out =
                    reference::gather(ys.values, idx, w64, c.t, c.k, c.h);
                // fp32 host emulation of the documented order: fma over j, then round once.
                std::vector<std::uint16_t> emulated(static_cast<std::size_t>(c.t) * h);
                for (std::int64_t t = 0; t < c.t; ++t)
                    for (std::size_t col = 0; col < h; ++col) {
                        float acc = 0.0f;
                        for (std::int32_t j = 0; j < c.k; ++j) {
                            const std::int32_t s = idx[t * c.k + j];
                            if (s < 0) continue;
                            const auto y = static_cast<float>(ys.values[s * h + col]);
                            acc = weighted ? std::fma(static_cast<float>(w64[t * c.k + j]), y, acc)
                                           : acc + y;
                        }
                        emulated[t * h + col] = to_half_bits(acc, c.dtype);
                    }
                std::vector<std::uint16_t> first;
                for (int run = 0; run < 2; ++run) {
                    d_out.poison();
                    MOEJIT_TEST_OK(moejit_gather(gpu_context(), c.dtype, d_ys.get(),
                                                 d_idx.as<std::int32_t>(), d_w, wdt, c.t, c.k, c.h,
                                                 d_out.get(), nullptr));
                    const auto out = d_out.download<std::uint16_t>();
                    if (run == 0) {
                        first = out;
                        const double err = relative_error(half_to_double(out, c.dtype), ref_out);
                        const double tol = c.dtype == MOEJIT_DTYPE_BF16 ? 1e-2 : 2e-3;
                        BOOST_TEST(err < tol, "gather relative error " << err);
                        BOOST_TEST((out == emulated), "gather differs from the fp32 j-order emulation");
                    } else {
                        BOOST_TEST((out == first), "gather: two runs differ");
                    }
                }
            }
        }

        // ---- chain: gather(scatter(x)) with weights = sum_j w[t,j] * x[t] over valid routes
        if (c.t > 0) {
            DeviceBuffer d_back(static_cast<std::size_t>(c.t) * h * 2);
            d_back.poison();
            MOEJIT_TEST_OK(moejit_gather(gpu_context(), c.dtype, d_xs.get(), d_idx.as<std::int32_t>(),
                                         d_w_fp32.get(), MOEJIT_DTYPE_FP32, c.t, c.k, c.h,
                                         d_back.get(), nullptr));
            std::vector<double> expect(static_cast<std::size_t>(c.t) * h, 0.0);
            for (std::int64_t t = 0; t < c.t; ++t)
                for (std::int32_t j = 0; j < c.k; ++j)
                    if (idx[t * c.k + j] >= 0)
                        for (std::size_t col = 0; col < h; ++col)
                            expect[t * h + col] += w_fp32[t * c.k + j] * x.values[t * h + col];
            const double err =
                relative_error(half_to_double(d_back.download<std::uint16_t>(), c.dtype), expect);
            BOOST_TEST(err < (c.dtype == MOEJIT_DTYPE_BF16 ? 1e-2 : 2e-3), "chain error " << err);
        }

        // ---- scatter_weights / gather_weights: exact
        for (const moejit_dtype_t wdt : {c.dtype, MOEJIT_DTYPE_FP32}) {
            const void *d_w = wdt == MOEJIT_DTYPE_FP32 ? d_w_fp32.get() : d_w_half.get();
            const std::vector<double> w64 = weights_as_double(w_half.bits, w_fp32, wdt);
            DeviceBuffer d_ws(static_cast<std::size_t>(rows) * 4);
            d_ws.poison();
            MOEJIT_TEST_OK(moejit_scatter_weights(gpu_context(), wdt, d_w, d_idx.as<std::int32_t>(),
                                                  c.t, c.k, d_ws.as<float>(), nullptr));
            const auto ws = d_ws.download<float>();
            const std::vector<double> ws_ref = reference::scatter_weights(w64, idx);
            std::size_t wrong = 0;
            for (std::int64_t s = 0; s < rows; ++s) {
                const bool same = std::isnan(ws_ref[s]) ? std::isnan(ws[s])
                                                        : static_cast<double>(ws[s]) == ws_ref[s];
                wrong += same ? 0 : 1;
            }
            BOOST_TEST(wrong == 0u, "scatter_weights: " << wrong << " wrong of " << rows);

            // d_w_s random fp32 [S]; d_weights [T,k] in wdt.
            std::vector<float> dws(static_cast<std::size_t>(rows));
            for (auto &v : dws) v = wd(rng);
            DeviceBuffer d_dws = DeviceBuffer::from(dws);
            const std::size_t wsize = wdt == MOEJIT_DTYPE_FP32 ? 4 : 2;
            DeviceBuffer d_dw(static_cast<std::size_t>(rows) * wsize);
            d_dw.poison();
            MOEJIT_TEST_OK(moejit_gather_weights(gpu_context(), wdt, d_dws.as<float>(),
                                                 d_idx.as<std::int32_t>(), c.t, c.k, d_dw.get(),
                                                 nullptr));
            const std::vector<double> dws64(dws.begin(), dws.end());
            const std::vector<double> dw_ref = reference::gather_weights(dws64, idx);
            wrong = 0;
            if (wdt == MOEJIT_DTYPE_FP32) {
                const auto dw = d_dw.download<float>();
                for (std::int64_t p = 0; p < rows; ++p)
                    wrong += static_cast<double>(dw[p]) == dw_ref[p] ? 0 : 1;
            } else {
                const auto dw = d_dw.download<std::uint16_t>();
                for (std::int64_t p = 0; p < rows; ++p)
                    wrong += dw[p] == to_half_bits(static_cast<float>(dw_ref[p]), wdt) ? 0 : 1;
            }
            BOOST_TEST(wrong == 0u, "gather_weights: " << wrong << " wrong of " << rows);
        }
    }
}

}  // namespace

BOOST_AUTO_TEST_CASE(scatter_gather_bf16_and_fp16) {
    gpu_context();  // makes the device context current before any allocation
    std::mt19937_64 rng(test_seed() + 5);
    for (const moejit_dtype_t dtype : {MOEJIT_DTYPE_BF16, MOEJIT_DTYPE_FP16}) {
        for (const SgCase &c : {
                 SgCase{dtype, 1, 1, 1, 8, Routes::random},        // T = 1, E = 1, smallest row
                 SgCase{dtype, 1, 8, 8, 2048, Routes::random},     // T = 1, k = E
                 SgCase{dtype, 37, 2, 4, 64, Routes::random},      // many rows per block
                 SgCase{dtype, 300, 8, 64, 2048, Routes::random},  // qwen-like
                 SgCase{dtype, 129, 4, 16, 2880, Routes::random},  // partial last vector step
                 SgCase{dtype, 64, 8, 256, 7168, Routes::random},  // deepseek-like
                 SgCase{dtype, 17, 8, 8, 7168, Routes::random},    // k = E
                 SgCase{dtype, 128, 2, 64, 1024, Routes::all_to_zero},
                 SgCase{dtype, 9, 2, 4, 16384, Routes::dropped},   // 1024-thread rows
                 SgCase{dtype, 100, 4, 8, 512, Routes::dropped},
                 SgCase{dtype, 0, 4, 8, 2048, Routes::random},     // T = 0
             })
            check_scatter_gather(c, rng);
    }
}

BOOST_AUTO_TEST_CASE(preloaded_kernels_match_the_c_abi) {
    gpu_context();  // makes the device context current before any allocation
    std::mt19937_64 rng(test_seed() + 7);
    moejit::Context &ctx = internal_ctx();
    const std::int64_t t = 333, h = 1536;
    const std::int32_t k = 4, e = 32;
    const auto sel = random_routes<std::int64_t>(t, k, e, rng);
    const RoutingResult expected = run_routing(sel, t, k, e);  // through the C ABI

    const RoutingBuffers b(sel, t, k, e);
    const moejit::RoutingIndexArgs ra = b.internal_args();
    moejit::routing_index(ctx, ra, moejit::load_routing_index(ctx, {moejit::DType::int64, e}));
    const RoutingResult got = b.download();
    BOOST_TEST((got == expected));
    // A kernel set loaded for another spec is refused.
    BOOST_CHECK_THROW(
        moejit::routing_index(ctx, ra, moejit::load_routing_index(ctx, {moejit::DType::int32, e})),
        moejit::Error);

    const HalfTensor x = random_half(static_cast<std::size_t>(t * h), MOEJIT_DTYPE_BF16, rng);
    DeviceBuffer d_x = DeviceBuffer::from(x.bits), xs_a(t * k * h * 2), xs_b(t * k * h * 2),
                 out_a(t * h * 2), out_b(t * h * 2);
    for (DeviceBuffer *buf : {&xs_a, &xs_b, &out_a, &out_b}) buf->poison();
    MOEJIT_TEST_OK(moejit_scatter(gpu_context(), MOEJIT_DTYPE_BF16, d_x.get(), b.index.as<std::int32_t>(),
                                  t, k, h, xs_a.get(), nullptr));
    moejit::ScatterArgs sa;
    sa.spec = {moejit::DType::bf16, h, k};
    sa.x = d_x.get();
    sa.scatter_index = b.index.as<std::int32_t>();
    sa.num_tokens = t;
    sa.xs = xs_b.get();
    moejit::scatter(ctx, sa, ctx.kernel(moejit::render_scatter(sa.spec)));
    const auto xs = xs_a.download<std::uint16_t>();
    BOOST_TEST((xs == xs_b.download<std::uint16_t>()));
    BOOST_TEST(std::none_of(xs.begin(), xs.end(), [](std::uint16_t b) { return b == 0xFFFF; }));

    MOEJIT_TEST_OK(moejit_gather(gpu_context(), MOEJIT_DTYPE_BF16, xs_a.get(), b.index.as<std::int32_t>(),
                                 nullptr, MOEJIT_DTYPE_FP32, t, k, h, out_a.get(), nullptr));
    moejit::GatherArgs ga;
    ga.spec = {moejit::DType::bf16, h, k, moejit::DType::fp32};
    ga.ys = xs_a.get();
    ga.scatter_index = b.index.as<std::int32_t>();
    ga.num_tokens = t;
    ga.out = out_b.get();
    moejit::gather(ctx, ga, ctx.kernel(moejit::render_gather(moejit::effective_gather_spec(ga))));
    const auto out = out_a.download<std::uint16_t>();
    BOOST_TEST((out == out_b.download<std::uint16_t>()));
    // Unweighted gather of k copies of x[t]: k·x[t], exact in fp32 and after rounding (k = 4).
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < out.size(); ++i)
        wrong += out[i] == to_half_bits(static_cast<float>(4.0 * x.values[i]), MOEJIT_DTYPE_BF16) ? 0 : 1;
    BOOST_TEST(wrong == 0u);
}

MOEJIT_GPU_TEST_MAIN("routing_gpu")
