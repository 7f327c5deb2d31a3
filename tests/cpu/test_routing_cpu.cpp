// Routing index, scatter and gather without a GPU: the CPU reference on hand-computed cases,
// the chunking arithmetic, every specialization compiled with NVRTC for sm_90a and sm_80
// through a compile-only context, and argument validation through the C ABI.
#define BOOST_TEST_MODULE routing
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "compile_only.hpp"
#include "runtime/context.hpp"
#include "moejit.h"
#include "ops/routing.hpp"
#include "ops/scatter_gather.hpp"
#include "reference_routing.hpp"

namespace fs = std::filesystem;
using namespace moejit;

namespace {

using moejit::test::CompileOnlyContext;

const auto kNoWeights = static_cast<DType>(0);

// Every kernel kind and dtype, over shapes that cover each geometry branch (rows per block > 1,
// partial last vector step, 1024-thread rows) and each warps-per-block value of the routing.
std::vector<KernelSource> all_specializations() {
    std::vector<KernelSource> out;
    for (auto id : {DType::int32, DType::int64})
        for (int e : {1, 8, 128, 256, 384, 1536, 4096, kRoutingMaxExperts}) {
            RoutingKernels k = render_routing_index(RoutingSpec{id, e});
            out.push_back(k.histogram);
            out.push_back(k.rank);
        }
    out.push_back(render_routing_index(RoutingSpec{DType::int32, 8}).row_scan);
    struct Shape {
        std::int64_t h;
        std::int32_t k;
    };
    const Shape shapes[] = {{8, 1}, {64, 2}, {2048, 8}, {2880, 4}, {7168, 8}, {kScatterMaxHidden, 2}};
    for (auto dtype : {DType::bf16, DType::fp16}) {
        for (const Shape &s : shapes) {
            out.push_back(render_scatter(ScatterSpec{dtype, s.h, s.k}));
            for (auto w : {kNoWeights, dtype, DType::fp32})
                out.push_back(render_gather(GatherSpec{dtype, s.h, s.k, w}));
        }
        out.push_back(render_scatter(ScatterSpec{dtype, 4096, kScatterMaxTopK}));
        out.push_back(render_gather(GatherSpec{dtype, 4096, kScatterMaxTopK, DType::fp32}));
    }
    for (auto w : {DType::bf16, DType::fp16, DType::fp32}) {
        out.push_back(render_scatter_weights(w));
        out.push_back(render_gather_weights(w));
    }
    return out;
}

bool readable_name(const std::string &name) {
    if (name.empty()) return false;
    for (char c : name)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
    return true;
}

// Status and a message that names `what`.
void expect_error(moejit_status_t status, moejit_status_t expected, const std::string &what) {
    const std::string message = moejit_last_error();
    BOOST_TEST(static_cast<int>(status) == static_cast<int>(expected),
               "status " << moejit_status_string(status) << ", expected "
                         << moejit_status_string(expected) << " (" << message << ")");
    BOOST_TEST(message.find(what) != std::string::npos,
               "message '" << message << "' does not name '" << what << "'");
}

// Never dereferenced: validation happens before anything touches the device.
template <class T = void> T *fake(std::uintptr_t offset = 0) {
    return reinterpret_cast<T *>((std::uintptr_t{1} << 20) + offset);
}

}  // namespace

// ------------------------------------------------------------------ the CPU reference

BOOST_AUTO_TEST_CASE(reference_routing_index_by_hand) {
    // T = 3, k = 2, E = 4; a duplicate route (token 1 -> expert 2 twice); expert 2 gets three.
    const std::vector<std::int32_t> sel = {2, 0, 2, 2, 1, 3};
    const auto r = reference::routing_index(sel, 3, 2, 4);
    BOOST_TEST(r.counts == (std::vector<std::int32_t>{1, 1, 3, 1}), boost::test_tools::per_element());
    BOOST_TEST(r.offsets == (std::vector<std::int32_t>{0, 1, 2, 5, 6}), boost::test_tools::per_element());
    // (0,0)->2: offsets[2]+0 = 2; (0,1)->0: 0; (1,0)->2: 3; (1,1)->2: 4; (2,0)->1: 1; (2,1)->3: 5.
    BOOST_TEST(r.scatter_index == (std::vector<std::int32_t>{2, 0, 3, 4, 1, 5}),
               boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(reference_routing_index_empty_and_dropped) {
    // int64 ids, expert 0 and 2 empty, ids -1 and 4 dropped.
    const std::vector<std::int64_t> sel = {1, -1, 4, 1, 3, 1};
    const auto r = reference::routing_index(sel, 3, 2, 4);
    BOOST_TEST(r.counts == (std::vector<std::int32_t>{0, 3, 0, 1}), boost::test_tools::per_element());
    BOOST_TEST(r.offsets == (std::vector<std::int32_t>{0, 0, 3, 3, 4}), boost::test_tools::per_element());
    BOOST_TEST(r.scatter_index == (std::vector<std::int32_t>{0, -1, -1, 1, 3, 2}),
               boost::test_tools::per_element());
    const auto empty = reference::routing_index(std::vector<std::int32_t>{}, 0, 2, 3);
    BOOST_TEST(empty.counts == (std::vector<std::int32_t>{0, 0, 0}), boost::test_tools::per_element());
    BOOST_TEST(empty.offsets == (std::vector<std::int32_t>{0, 0, 0, 0}), boost::test_tools::per_element());
    BOOST_TEST(empty.scatter_index.empty());
}

BOOST_AUTO_TEST_CASE(reference_scatter_gather_by_hand) {
    // T = 2, k = 2, H = 2, scatter_index = [[2, 0], [1, 3]].
    const std::vector<std::int32_t> idx = {2, 0, 1, 3};
    const std::vector<double> x = {1.5, -2.0, 3.0, 0.25};
    const auto xs = reference::scatter(x, idx, 2, 2, 2);
    BOOST_TEST(xs == (std::vector<double>{1.5, -2.0, 3.0, 0.25, 1.5, -2.0, 3.0, 0.25}),
               boost::test_tools::per_element());
    const std::vector<double> ys = {1, 2, 3, 4, 5, 6, 7, 8};  // rows 0..3
    const std::vector<double> w = {0.5, -1.0, 2.0, 0.25};
    // out[0] = 0.5·ys[2] − 1·ys[0] = (2.5−1, 3−2); out[1] = 2·ys[1] + 0.25·ys[3] = (6+1.75, 8+2)
    BOOST_TEST(reference::gather(ys, idx, w, 2, 2, 2) == (std::vector<double>{1.5, 1.0, 7.75, 10.0}),
               boost::test_tools::per_element());
    // Unweighted: out[0] = ys[2] + ys[0], out[1] = ys[1] + ys[3].
    BOOST_TEST(reference::gather(ys, idx, {}, 2, 2, 2) == (std::vector<double>{6, 8, 10, 12}),
               boost::test_tools::per_element());
    BOOST_TEST(reference::scatter_weights(w, idx) == (std::vector<double>{-1.0, 2.0, 0.5, 0.25}),
               boost::test_tools::per_element());
    const std::vector<double> dws = {10, 20, 30, 40};
    BOOST_TEST(reference::gather_weights(dws, idx) == (std::vector<double>{30, 10, 20, 40}),
               boost::test_tools::per_element());
    // A dropped route: skipped by scatter (row stays NaN), adds nothing to gather.
    const std::vector<std::int32_t> dropped = {-1, 0};
    const auto xs1 = reference::scatter({1.0, 2.0}, dropped, 1, 2, 1);
    BOOST_TEST(xs1[0] == 1.0);
    BOOST_TEST(std::isnan(xs1[1]));
    BOOST_TEST(reference::gather({4.0, 5.0}, dropped, {}, 1, 2, 1)[0] == 4.0);
    BOOST_TEST(reference::gather_weights({4.0, 5.0}, dropped)[0] == 0.0);
}

// ------------------------------------------------------------------ chunking

BOOST_AUTO_TEST_CASE(chunking_covers_every_route) {
    for (std::int32_t e : {1, 8, 256, 384, 4096, kRoutingMaxExperts})
        for (std::int64_t rows : {0LL, 1LL, 31LL, 1000LL, 262144LL, 262145LL, 4194304LL,
                                  2147483647LL}) {
            const RoutingChunking c = routing_chunking(rows, e);
            BOOST_TEST(c.warps >= 1);
            BOOST_TEST(c.warps <= 8);
            // The rank kernel's shared table fits in 48 KiB.
            BOOST_TEST((std::int64_t{c.warps} * e + 32) * 4 <= 48 * 1024);
            BOOST_TEST(c.rows_per_warp % 32 == 0);
            const std::int64_t chunk = std::int64_t{c.warps} * c.rows_per_warp;
            BOOST_TEST(std::int64_t{c.num_chunks} * chunk >= rows);        // covers S
            BOOST_TEST((c.num_chunks == 0 || (c.num_chunks - 1) * chunk < rows));  // no idle chunk
            BOOST_TEST(c.num_chunks <= 256);
            BOOST_TEST(c.workspace_bytes == std::size_t(e) * c.num_chunks * 4);
        }
    // The scale target: S = 262144 routes over 256 experts.
    const RoutingChunking big = routing_chunking(262144, 256);
    BOOST_TEST(big.num_chunks == 256);
    BOOST_TEST(big.warps == 8);
}

BOOST_AUTO_TEST_CASE(workspace_size_through_the_c_abi) {
    size_t bytes = 123;
    BOOST_TEST(moejit_routing_index_workspace_size(0, 8, 256, &bytes) == MOEJIT_SUCCESS);
    BOOST_TEST(bytes == 0u);
    BOOST_TEST(moejit_routing_index_workspace_size(32768, 8, 256, &bytes) == MOEJIT_SUCCESS);
    BOOST_TEST(bytes == routing_chunking(262144, 256).workspace_bytes);
    BOOST_TEST(bytes > 0u);
    expect_error(moejit_routing_index_workspace_size(1, 8, 256, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "bytes");
    expect_error(moejit_routing_index_workspace_size(-1, 8, 256, &bytes),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "num_tokens");
    expect_error(moejit_routing_index_workspace_size(4, 0, 256, &bytes),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "top_k");
    expect_error(moejit_routing_index_workspace_size(4, 2, 0, &bytes),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "num_experts");
    expect_error(moejit_routing_index_workspace_size(4, 2, kRoutingMaxExperts + 1, &bytes),
                 MOEJIT_ERROR_UNSUPPORTED, "num_experts");
    expect_error(moejit_routing_index_workspace_size(std::int64_t{1} << 31, 2, 8, &bytes),
                 MOEJIT_ERROR_UNSUPPORTED, "num_tokens * top_k");
}

// ------------------------------------------------------------------ JIT: render + NVRTC

BOOST_AUTO_TEST_CASE(render_functions_are_pure_and_named) {
    const auto a = all_specializations();
    const auto b = all_specializations();
    BOOST_REQUIRE(a.size() == b.size());
    std::set<std::string> names;
    for (std::size_t i = 0; i < a.size(); ++i) {
        BOOST_TEST(a[i].source == b[i].source);
        BOOST_TEST(a[i].name == b[i].name);
        BOOST_TEST(readable_name(a[i].name), a[i].name);
        BOOST_TEST(a[i].source.find(a[i].entry) != std::string::npos);
        BOOST_TEST(a[i].source.find("#include \"" + a[i].template_name + "\"") != std::string::npos);
        names.insert(a[i].name);
    }
    BOOST_TEST(names.size() == a.size());  // distinct specializations, distinct names
    BOOST_TEST(render_scatter(ScatterSpec{DType::bf16, 2048, 8}).name == "scatter_bf16_h2048_k8");
    BOOST_TEST(render_gather(GatherSpec{DType::fp16, 2048, 8, kNoWeights}).name ==
               "gather_fp16_h2048_k8_wnone");
    BOOST_TEST(render_routing_index(RoutingSpec{DType::int64, 256}).rank.name ==
               "routing_rank_int64_e256");
}

BOOST_AUTO_TEST_CASE(every_specialization_compiles_for_sm90a_and_sm80) {
    const auto sources = all_specializations();
    for (const char *arch : {"sm_90a", "sm_80"}) {
        CompileOnlyContext context(arch);
        for (const KernelSource &s : sources) {
            try {
                context.impl().kernel(s);
            } catch (const Error &e) {
                BOOST_ERROR(arch << " " << s.name << ": " << e.what());
            }
        }
        moejit_cache_stats_t stats;
        BOOST_REQUIRE(moejit_cache_stats_init(&stats) == MOEJIT_SUCCESS);
        BOOST_REQUIRE(moejit_context_cache_stats(context.get(), &stats) == MOEJIT_SUCCESS);
        BOOST_TEST(stats.compiles == sources.size(), arch);
        BOOST_TEST(stats.compile_failures == 0u, arch);
    }
}

// ------------------------------------------------------------------ argument validation

BOOST_AUTO_TEST_CASE(routing_index_arguments) {
    CompileOnlyContext context("sm_90a");
    moejit_context_t c = context.get();
    const std::int64_t t = 64;
    const std::int32_t k = 2, e = 8;
    size_t ws = 0;
    BOOST_REQUIRE(moejit_routing_index_workspace_size(t, k, e, &ws) == MOEJIT_SUCCESS);
    auto call = [&](moejit_context_t ctx, moejit_dtype_t id, const void *sel, std::int64_t tokens,
                    std::int32_t top_k, std::int32_t experts, int32_t *counts, int32_t *offsets,
                    int32_t *index, void *workspace, size_t workspace_size) {
        return moejit_routing_index(ctx, id, sel, tokens, top_k, experts, counts, offsets, index,
                                    workspace, workspace_size, nullptr);
    };
    auto *p = fake<int32_t>();
    expect_error(call(nullptr, MOEJIT_DTYPE_INT32, p, t, k, e, p, p, p, p, ws),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "context");
    expect_error(call(c, MOEJIT_DTYPE_BF16, p, t, k, e, p, p, p, p, ws),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "index_dtype");
    expect_error(call(c, static_cast<moejit_dtype_t>(77), p, t, k, e, p, p, p, p, ws),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "index_dtype");
    expect_error(call(c, MOEJIT_DTYPE_INT32, nullptr, t, k, e, p, p, p, p, ws),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "selected_experts is NULL");
    expect_error(call(c, MOEJIT_DTYPE_INT64, fake(4), t, k, e, p, p, p, p, ws),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "selected_experts =");  // misaligned int64
    expect_error(call(c, MOEJIT_DTYPE_INT32, p, t, k, e, nullptr, p, p, p, ws),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "counts is NULL");
    expect_error(call(c, MOEJIT_DTYPE_INT32, p, t, k, e, p, nullptr, p, p, ws),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "offsets is NULL");
    expect_error(call(c, MOEJIT_DTYPE_INT32, p, t, k, e, p, p, nullptr, p, ws),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "scatter_index is NULL");
    expect_error(call(c, MOEJIT_DTYPE_INT32, p, t, k, e, p, p, p, nullptr, ws),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "workspace is NULL");
    expect_error(call(c, MOEJIT_DTYPE_INT32, p, t, k, e, p, p, p, p, ws - 1),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "workspace_size");
    expect_error(call(c, MOEJIT_DTYPE_INT32, p, -3, k, e, p, p, p, p, ws),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "num_tokens");
    expect_error(call(c, MOEJIT_DTYPE_INT32, p, t, 0, e, p, p, p, p, ws),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "top_k");
    expect_error(call(c, MOEJIT_DTYPE_INT32, p, t, k, 0, p, p, p, p, ws),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "num_experts");
    expect_error(call(c, MOEJIT_DTYPE_INT32, p, t, k, kRoutingMaxExperts + 1, p, p, p, p, ws),
                 MOEJIT_ERROR_UNSUPPORTED, "num_experts");
    // Valid arguments reach the device check; T = 0 accepts null token tensors and workspace.
    expect_error(call(c, MOEJIT_DTYPE_INT32, p, t, k, e, p, p, p, p, ws),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "compile-only");
    expect_error(call(c, MOEJIT_DTYPE_INT64, nullptr, 0, k, e, p, p, nullptr, nullptr, 0),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "compile-only");
    expect_error(call(c, MOEJIT_DTYPE_INT32, nullptr, 0, k, e, p, nullptr, nullptr, nullptr, 0),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "offsets is NULL");  // [E+1] is never empty
}

BOOST_AUTO_TEST_CASE(scatter_arguments) {
    CompileOnlyContext context("sm_90a");
    moejit_context_t c = context.get();
    const auto bf16 = MOEJIT_DTYPE_BF16;
    auto *idx = fake<int32_t>();
    void *p = fake();
    expect_error(moejit_scatter(nullptr, bf16, p, idx, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "context");
    expect_error(moejit_scatter(c, MOEJIT_DTYPE_FP32, p, idx, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_UNSUPPORTED, "dtype");
    expect_error(moejit_scatter(c, MOEJIT_DTYPE_INT32, p, idx, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "dtype");
    expect_error(moejit_scatter(c, static_cast<moejit_dtype_t>(99), p, idx, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "dtype");
    expect_error(moejit_scatter(c, bf16, p, idx, 4, 2, 100, p, nullptr),
                 MOEJIT_ERROR_UNSUPPORTED, "hidden_size");
    expect_error(moejit_scatter(c, bf16, p, idx, 4, 2, 0, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "hidden_size");
    expect_error(moejit_scatter(c, bf16, p, idx, 4, 2, kScatterMaxHidden + 8, p, nullptr),
                 MOEJIT_ERROR_UNSUPPORTED, "hidden_size");
    expect_error(moejit_scatter(c, bf16, p, idx, 4, 0, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "top_k");
    expect_error(moejit_scatter(c, bf16, p, idx, 4, kScatterMaxTopK + 1, 64, p, nullptr),
                 MOEJIT_ERROR_UNSUPPORTED, "top_k");
    expect_error(moejit_scatter(c, bf16, p, idx, -1, 2, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "num_tokens");
    expect_error(moejit_scatter(c, bf16, nullptr, idx, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "x is NULL");
    expect_error(moejit_scatter(c, bf16, fake(8), idx, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "x = ");
    expect_error(moejit_scatter(c, bf16, p, nullptr, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "scatter_index is NULL");
    expect_error(moejit_scatter(c, bf16, p, idx, 4, 2, 64, nullptr, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "xs is NULL");
    expect_error(moejit_scatter(c, bf16, p, idx, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "compile-only");
    expect_error(moejit_scatter(c, bf16, nullptr, nullptr, 0, 2, 64, nullptr, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "compile-only");
}

BOOST_AUTO_TEST_CASE(gather_arguments) {
    CompileOnlyContext context("sm_90a");
    moejit_context_t c = context.get();
    const auto bf16 = MOEJIT_DTYPE_BF16, fp32 = MOEJIT_DTYPE_FP32;
    auto *idx = fake<int32_t>();
    void *p = fake();
    expect_error(moejit_gather(nullptr, bf16, p, idx, p, fp32, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "context");
    expect_error(moejit_gather(c, MOEJIT_DTYPE_FP32, p, idx, p, fp32, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_UNSUPPORTED, "dtype");
    expect_error(moejit_gather(c, MOEJIT_DTYPE_INT64, p, idx, p, fp32, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "dtype");
    expect_error(moejit_gather(c, bf16, p, idx, p, MOEJIT_DTYPE_INT32, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "weight_dtype");
    expect_error(moejit_gather(c, bf16, p, idx, p, MOEJIT_DTYPE_FP16, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_UNSUPPORTED, "weight_dtype");
    expect_error(moejit_gather(c, bf16, p, idx, p, fp32, 4, 2, 36, p, nullptr),
                 MOEJIT_ERROR_UNSUPPORTED, "hidden_size");
    expect_error(moejit_gather(c, bf16, p, idx, p, fp32, 4, -2, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "top_k");
    expect_error(moejit_gather(c, bf16, nullptr, idx, p, fp32, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "ys is NULL");
    expect_error(moejit_gather(c, bf16, p, nullptr, p, fp32, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "scatter_index is NULL");
    expect_error(moejit_gather(c, bf16, p, idx, fake(2), fp32, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "weights =");  // misaligned fp32
    expect_error(moejit_gather(c, bf16, p, idx, p, fp32, 4, 2, 64, nullptr, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "out is NULL");
    expect_error(moejit_gather(c, bf16, p, idx, p, fp32, 4, 2, 64, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "compile-only");
    // Without weights, weight_dtype is ignored.
    expect_error(moejit_gather(c, bf16, p, idx, nullptr, static_cast<moejit_dtype_t>(0), 4, 2, 64,
                               p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "compile-only");
}

BOOST_AUTO_TEST_CASE(weight_scatter_gather_arguments) {
    CompileOnlyContext context("sm_90a");
    moejit_context_t c = context.get();
    auto *idx = fake<int32_t>();
    auto *f = fake<float>();
    void *p = fake();
    expect_error(moejit_scatter_weights(nullptr, MOEJIT_DTYPE_BF16, p, idx, 4, 2, f, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "context");
    expect_error(moejit_scatter_weights(c, MOEJIT_DTYPE_INT64, p, idx, 4, 2, f, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "weight_dtype");
    expect_error(moejit_scatter_weights(c, MOEJIT_DTYPE_BF16, nullptr, idx, 4, 2, f, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "weights is NULL");
    expect_error(moejit_scatter_weights(c, MOEJIT_DTYPE_BF16, p, nullptr, 4, 2, f, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "scatter_index is NULL");
    expect_error(moejit_scatter_weights(c, MOEJIT_DTYPE_BF16, p, idx, 4, 2, nullptr, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "w_s is NULL");
    expect_error(moejit_scatter_weights(c, MOEJIT_DTYPE_BF16, p, idx, 4, 0, f, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "top_k");
    expect_error(moejit_scatter_weights(c, MOEJIT_DTYPE_FP32, p, idx, 4, 2, f, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "compile-only");

    expect_error(moejit_gather_weights(nullptr, MOEJIT_DTYPE_FP16, f, idx, 4, 2, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "context");
    expect_error(moejit_gather_weights(c, static_cast<moejit_dtype_t>(0), f, idx, 4, 2, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "weight_dtype");
    expect_error(moejit_gather_weights(c, MOEJIT_DTYPE_FP16, nullptr, idx, 4, 2, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "d_w_s is NULL");
    expect_error(moejit_gather_weights(c, MOEJIT_DTYPE_FP16, f, nullptr, 4, 2, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "scatter_index is NULL");
    expect_error(moejit_gather_weights(c, MOEJIT_DTYPE_FP16, f, idx, 4, 2, nullptr, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "d_weights is NULL");
    expect_error(moejit_gather_weights(c, MOEJIT_DTYPE_FP16, f, idx, -4, 2, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "num_tokens");
    expect_error(moejit_gather_weights(c, MOEJIT_DTYPE_FP16, f, idx, 4, 2, p, nullptr),
                 MOEJIT_ERROR_INVALID_ARGUMENT, "compile-only");
}
