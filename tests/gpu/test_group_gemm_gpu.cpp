// Grouped GEMMs on a real device against the float64 reference: random routing, the
// duplicate-route seed pattern (T=128, k=2, every route to expert 0: 256 rows for one expert
// with BLOCK_M = 128), empty experts, E = 1, k = E, T = 0 and T = 1, ragged H=2880 / I=1408,
// C in the operand dtype and fp32, accumulate, every tile config the dispatcher may pick.
// Every output is NaN-poisoned first (accumulate: prefilled with random values), must be
// finite afterwards, and must be bitwise identical across two runs.
#include "gpu_main.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <string>

#include "runtime/context.hpp"
#include "base/dtype.hpp"
#include "gemm/tile_schedule.hpp"
#include "gemm/group_gemm.hpp"
#include "capi_convert.hpp"  // the cases' C arguments, as the library's
#include "compile_only.hpp"
#include "expert_counts.hpp"
#include "reference_gemm.hpp"

MOEJIT_GPU_TEST_MAIN("group_gemm_gpu")

// Cases are written as designated initializers that leave defaulted fields out on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

using namespace moejit;
using namespace moejit::test;

namespace {



// A C tensor on the device: its host values as doubles, poison or random prefill.
struct CTensor {
    moejit_dtype_t dtype;
    std::size_t count;
    DeviceBuffer buf;
    std::vector<double> prefill;        // accumulate: the values C held before the op
    std::vector<std::uint8_t> prefill_bytes;

    CTensor(moejit_dtype_t dtype_, std::size_t count_)
        : dtype(dtype_), count(count_), buf(count_ * dtype_size(to_internal(dtype_))) {}

    void make_prefill(std::mt19937_64 &rng) {
        if (dtype == MOEJIT_DTYPE_FP32) {
            std::normal_distribution<float> dist(0.0f, 1.0f);
            std::vector<float> host(count);
            prefill.resize(count);
            for (std::size_t i = 0; i < count; ++i) prefill[i] = host[i] = dist(rng);
            prefill_bytes.resize(count * 4);
            if (count) std::memcpy(prefill_bytes.data(), host.data(), count * 4);
        } else {
            HalfTensor t = random_half(count, dtype, rng);
            prefill = t.values;
            prefill_bytes.resize(count * 2);
            if (count) std::memcpy(prefill_bytes.data(), t.bits.data(), count * 2);
        }
    }
    // Before each run: the prefill (accumulate) or NaN everywhere.
    void reset(bool accumulate) {
        if (accumulate)
            buf.upload(prefill_bytes);
        else
            buf.poison();
    }
    std::vector<std::uint8_t> bytes() const { return buf.download<std::uint8_t>(); }
    std::vector<double> values() const {
        if (dtype == MOEJIT_DTYPE_FP32) {
            std::vector<float> f = buf.download<float>();
            return std::vector<double>(f.begin(), f.end());
        }
        return half_to_double(buf.download<std::uint16_t>(), dtype);
    }
};

double tolerance(moejit_dtype_t c_dtype) { return c_dtype == MOEJIT_DTYPE_FP32 ? 1e-4 : 1e-2; }

// ‖out−ref‖/‖ref‖ over each block of `width` consecutive values (rows of C), the worst one.
double worst_block_error(const std::vector<double> &out, const std::vector<double> &ref,
                         std::size_t begin, std::size_t end, std::size_t width) {
    double worst = 0;
    for (std::size_t r = begin; r < end; ++r) {
        std::vector<double> o(out.begin() + r * width, out.begin() + (r + 1) * width);
        std::vector<double> f(ref.begin() + r * width, ref.begin() + (r + 1) * width);
        worst = std::max(worst, relative_error(o, f));
    }
    return worst;
}

// ---------------------------------------------------------------- same_nk

struct NkCase {
    std::string name;
    std::vector<int> counts;  // rows per expert
    std::int64_t n = 256, k = 256;
    bool b_transposed = true;
    bool accumulate = false;
    moejit_dtype_t dtype = MOEJIT_DTYPE_BF16;
    moejit_dtype_t c_dtype = MOEJIT_DTYPE_BF16;
    std::optional<GemmTileConfig> tile;
    moejit_context_t context = nullptr;  // the C ABI call's context (default: the shared one)
};

void run_nk(const NkCase &tc) {
    BOOST_TEST_CONTEXT("same_nk case " << tc.name << (tc.tile ? " tile " + to_string(*tc.tile) : "")) {
        std::mt19937_64 rng = case_rng(tc.name + (tc.tile ? to_string(*tc.tile) : ""));
        const int E = static_cast<int>(tc.counts.size());
        const std::vector<std::int32_t> offsets = offsets_from_counts(tc.counts);
        const std::int64_t S = offsets[E], N = tc.n, K = tc.k;
        HalfTensor a = random_half(static_cast<std::size_t>(S * K), tc.dtype, rng);
        HalfTensor b = random_half(static_cast<std::size_t>(E * N * K), tc.dtype, rng);
        DeviceBuffer da = DeviceBuffer::from(a.bits), db = DeviceBuffer::from(b.bits);
        DeviceBuffer doff = DeviceBuffer::from(offsets);
        CTensor c(tc.c_dtype, static_cast<std::size_t>(S * N));
        if (tc.accumulate) c.make_prefill(rng);

        moejit_group_gemm_nk_args_t args;
        MOEJIT_TEST_OK(moejit_group_gemm_nk_args_init(&args));
        args.dtype = tc.dtype, args.c_dtype = tc.c_dtype;
        args.rows = S, args.n = N, args.k = K, args.num_experts = E;
        args.b_transposed = tc.b_transposed;
        args.accumulate = tc.accumulate;
        args.a = da.get(), args.b = db.get(), args.c = c.buf.get();
        args.offsets = doff.as<const std::int32_t>();
        auto run = [&] {
            c.reset(tc.accumulate);
            if (tc.tile)
                group_gemm_same_nk(internal_ctx(), to_internal(args), &*tc.tile);
            else
                MOEJIT_TEST_OK(moejit_group_gemm_same_nk(tc.context ? tc.context : gpu_context(), &args));
            synchronize();
        };
        run();
        const std::vector<double> out = c.values();
        const std::vector<std::uint8_t> first = c.bytes();
        std::vector<double> ref = reference::gemm_nk(a.values, b.values, offsets, S, N, K, tc.b_transposed);
        if (tc.accumulate)
            for (std::size_t i = 0; i < ref.size(); ++i) ref[i] += c.prefill[i];

        BOOST_TEST(all_finite(out), "every element of C is written (NaN-poisoned before)");
        const double err = relative_error(out, ref);
        BOOST_TEST(err < tolerance(tc.c_dtype), "relative error " << err);
        const double row_err = worst_block_error(out, ref, 0, static_cast<std::size_t>(S), static_cast<std::size_t>(N));
        BOOST_TEST(row_err < 3 * tolerance(tc.c_dtype), "worst row relative error " << row_err);

        run();
        BOOST_TEST((c.bytes() == first), "bitwise identical across two runs");
    }
}

GemmTileConfig tile(int bm, int bn, int bk, int stages, int wm, int wn, int min_blocks) {
    return {.block_m = bm, .block_n = bn, .block_k = bk, .stages = stages, .warps_m = wm, .warps_n = wn,
            .min_blocks_per_sm = min_blocks};
}

// Every config shape the heuristic or a tuner may pick: the mma.sync engine everywhere, and on
// sm_90a the wgmma engine's widths and ring depths (the mma.sync kernels stay covered there).
std::vector<GemmTileConfig> tile_zoo() {
    std::vector<GemmTileConfig> zoo = {
        tile(128, 128, 32, 4, 2, 4, 2), tile(128, 128, 64, 3, 2, 4, 2), tile(64, 128, 32, 4, 2, 4, 2),
        tile(128, 256, 32, 3, 2, 4, 1), tile(256, 128, 32, 3, 4, 2, 1), tile(128, 64, 32, 4, 4, 2, 2),
        tile(64, 64, 32, 4, 2, 2, 3),   tile(32, 128, 64, 4, 1, 4, 2),  tile(128, 128, 32, 2, 2, 2, 1)};
    if (internal_ctx().arch() == "sm_90a")
        for (const char *w : {"wgmma_128x64x64_s6", "wgmma_128x128x64_s4_g4", "wgmma_128x256x64_s2",
                              "wgmma_128x256x64_s4_g16", "wgmma_128x128x64_s4_g4_e1", "wgmma_128x256x64_s3_e1",
                              "wgmma_128x64x64_s5_e1", "wgmma_128x128x64_s4_g4_p1", "wgmma_128x128x64_s4_e1_p1",
                              "wgmma_128x64x64_s2_e1_p1", "wgmma_128x128x64_s2_g1_p1", "wgmma_128x128x64_s4_e1_p2",
                              "wgmma_128x256x64_s4_e1_r1", "wgmma_128x128x64_s6_g4_e1_r1", "wgmma_128x64x64_s6_e1_r1"})
            zoo.push_back(parse_tile_config(w, "tile_zoo"));
    return zoo;
}

// ---------------------------------------------------------------- same_mn

struct MnCase {
    std::string name;
    std::vector<int> counts;
    std::int64_t m = 256, n = 256;
    bool accumulate = false;
    moejit_dtype_t dtype = MOEJIT_DTYPE_BF16;
    moejit_dtype_t c_dtype = MOEJIT_DTYPE_FP32;
    std::optional<GemmTileConfig> tile;
    moejit_context_t context = nullptr;  // the C ABI call's context (default: the shared one)
    bool split = false;   // launch with a NaN-poisoned split workspace and split_rows
    int split_rows = -1;  // -1: the rule (mn_split), else this segment length
};

void run_mn(const MnCase &tc) {
    BOOST_TEST_CONTEXT("same_mn case " << tc.name << (tc.tile ? " tile " + to_string(*tc.tile) : "")) {
        std::mt19937_64 rng = case_rng(tc.name + (tc.tile ? to_string(*tc.tile) : ""));
        const int E = static_cast<int>(tc.counts.size());
        const std::vector<std::int32_t> offsets = offsets_from_counts(tc.counts);
        const std::int64_t S = offsets[E], M = tc.m, N = tc.n;
        HalfTensor a = random_half(static_cast<std::size_t>(S * M), tc.dtype, rng);
        HalfTensor b = random_half(static_cast<std::size_t>(S * N), tc.dtype, rng);
        DeviceBuffer da = DeviceBuffer::from(a.bits), db = DeviceBuffer::from(b.bits);
        DeviceBuffer doff = DeviceBuffer::from(offsets);
        CTensor c(tc.c_dtype, static_cast<std::size_t>(E * M * N));
        if (tc.accumulate) c.make_prefill(rng);

        moejit_group_gemm_mn_args_t args;
        MOEJIT_TEST_OK(moejit_group_gemm_mn_args_init(&args));
        args.dtype = tc.dtype, args.c_dtype = tc.c_dtype;
        args.rows = S, args.m = M, args.n = N, args.num_experts = E;
        args.accumulate = tc.accumulate;
        args.a = da.get(), args.b = db.get(), args.c = c.buf.get();
        args.offsets = doff.as<const std::int32_t>();
        // The split path: the spec's own launcher with a workspace (the C ABI op has none).
        MnSplit split = mn_split(S, M, N);
        if (tc.split_rows >= 0) {
            split.split_rows = tc.split_rows;
            split.slots = tc.split_rows > 0 ? 2 * S / tc.split_rows : 0;
        }
        if (tc.split) BOOST_TEST_MESSAGE("split_rows " << split.split_rows << " slots " << split.slots);
        DeviceBuffer workspace(std::max<std::size_t>(16, mn_split_workspace_bytes(split, E, M, N)));
        const std::vector<std::uint8_t> nan_bytes(workspace.bytes(), 0xFF);
        auto run = [&] {
            c.reset(tc.accumulate);
            if (tc.split) {
                GemmMnSpec spec = make_mn_spec(to_internal(tc.dtype), to_internal(tc.c_dtype), M, N, tc.accumulate, S, E,
                                               internal_ctx().compute_capability());
                if (tc.tile) spec.tile = *tc.tile;
                GemmOperands ops{da.get(), db.get(), c.buf.get(), doff.as<const std::int32_t>(), S, E, nullptr};
                workspace.upload(nan_bytes);
                ops.workspace = workspace.get();
                ops.workspace_bytes = workspace.bytes();
                ops.split_rows = tc.split_rows;
                launch_group_gemm_mn(internal_ctx(), spec, ops);
            } else if (tc.tile) {
                group_gemm_same_mn(internal_ctx(), to_internal(args), &*tc.tile);
            } else {
                MOEJIT_TEST_OK(moejit_group_gemm_same_mn(tc.context ? tc.context : gpu_context(), &args));
            }
            synchronize();
        };
        run();
        const std::vector<double> out = c.values();
        const std::vector<std::uint8_t> first = c.bytes();
        std::vector<double> ref = reference::gemm_mn(a.values, b.values, offsets, S, M, N);
        if (tc.accumulate)
            for (std::size_t i = 0; i < ref.size(); ++i) ref[i] += c.prefill[i];

        BOOST_TEST(all_finite(out), "every element of C is written (NaN-poisoned before)");
        const double err = relative_error(out, ref);
        BOOST_TEST(err < tolerance(tc.c_dtype), "relative error " << err);
        const std::size_t per_expert = static_cast<std::size_t>(M * N);
        for (int e = 0; e < E; ++e) {
            const std::size_t begin = e * per_expert, end = begin + per_expert;
            if (tc.counts[e] == 0) {
                // Exactly 0, or untouched (bitwise the prefill) when accumulating.
                std::size_t elem = dtype_size(to_internal(tc.c_dtype));
                bool exact = true;
                for (std::size_t i = begin; i < end && exact; ++i) {
                    if (tc.accumulate)
                        exact = std::memcmp(&first[i * elem], &c.prefill_bytes[i * elem], elem) == 0;
                    else
                        exact = out[i] == 0.0;
                }
                BOOST_TEST(exact, "expert " << e << " has no rows: C_e must be "
                                            << (tc.accumulate ? "untouched" : "exactly 0"));
            } else {
                const double worst = worst_block_error(out, ref, begin / N, end / N, static_cast<std::size_t>(N));
                BOOST_TEST(worst < 3 * tolerance(tc.c_dtype), "expert " << e << " worst row error " << worst);
            }
        }
        run();
        BOOST_TEST((c.bytes() == first), "bitwise identical across two runs");
    }
}

std::vector<int> all_to_expert0(int tokens, int top_k, int num_experts) {
    return all_to_expert(tokens * top_k, num_experts, 0);
}

}  // namespace


// ================================================================ same_nk

BOOST_AUTO_TEST_CASE(nk_random_routing) {
    std::mt19937_64 rng = case_rng("nk_random_routing");
    for (bool bt : {true, false})
        run_nk({.name = bt ? "random_bt" : "random_bn", .counts = random_counts(512, 4, 16, rng),
                .n = 768, .k = 1024, .b_transposed = bt});
}

// The bug this library exists for: T=128, k=2, every route to expert 0 gives expert 0 S = 256
// rows; a bound from T (ceil(128/128) = 1 tile) would leave rows 128..255 NaN.
BOOST_AUTO_TEST_CASE(nk_seed_pattern_all_routes_to_one_expert) {
    GemmTileConfig bm128 = tile(128, 128, 32, 4, 2, 4, 2);
    for (bool bt : {true, false})
        for (int E : {1, 8})
            run_nk({.name = "seed", .counts = all_to_expert0(128, 2, E), .n = 256, .k = 256,
                    .b_transposed = bt, .tile = bm128});
    run_nk({.name = "seed_heuristic", .counts = all_to_expert0(128, 2, 8), .n = 512, .k = 384});
}

BOOST_AUTO_TEST_CASE(nk_empty_experts) {
    std::mt19937_64 rng = case_rng("nk_empty_experts");
    // Every other expert empty, and the first and last too.
    std::vector<int> counts = random_counts(300, 2, 12, rng, {1, 3, 5, 7, 9});
    run_nk({.name = "empty_experts", .counts = counts, .n = 384, .k = 512});
    run_nk({.name = "empty_experts_bn", .counts = counts, .n = 384, .k = 512, .b_transposed = false});
}

BOOST_AUTO_TEST_CASE(nk_one_expert_and_k_equals_e) {
    run_nk({.name = "e1", .counts = {300}, .n = 320, .k = 448});
    // k = E = 4: every token routed to every expert.
    run_nk({.name = "k_eq_e", .counts = {100, 100, 100, 100}, .n = 256, .k = 256});
}

BOOST_AUTO_TEST_CASE(nk_tiny_batches) {
    std::mt19937_64 rng = case_rng("nk_tiny");
    run_nk({.name = "t1", .counts = random_counts(1, 2, 4, rng), .n = 256, .k = 256});  // T = 1
    run_nk({.name = "t1_dup", .counts = {0, 0, 2, 0}, .n = 256, .k = 256});             // both routes to expert 2
    run_nk({.name = "t0", .counts = {0, 0, 0, 0}, .n = 256, .k = 256});                 // T = 0
}

BOOST_AUTO_TEST_CASE(nk_zero_rows_accepts_null_tensors) {
    moejit_group_gemm_nk_args_t args;
    MOEJIT_TEST_OK(moejit_group_gemm_nk_args_init(&args));
    args.rows = 0, args.n = 256, args.k = 256, args.num_experts = 4;
    MOEJIT_TEST_OK(moejit_group_gemm_same_nk(gpu_context(), &args));
}

// gpt-oss-like ragged sizes: H = 2880 and I = 1408 are not multiples of the 128 tile.
BOOST_AUTO_TEST_CASE(nk_ragged_h2880_i1408) {
    std::mt19937_64 rng = case_rng("nk_ragged");
    const std::int64_t H = 2880, I = 1408;
    std::vector<int> counts = random_counts(80, 4, 4, rng);
    run_nk({.name = "fc1_fprop", .counts = counts, .n = 2 * I, .k = H});
    run_nk({.name = "fc2_fprop", .counts = counts, .n = H, .k = I});
    run_nk({.name = "fc2_dgrad", .counts = counts, .n = I, .k = H, .b_transposed = false});
    run_nk({.name = "fc1_dgrad", .counts = counts, .n = H, .k = 2 * I, .b_transposed = false});
}

BOOST_AUTO_TEST_CASE(nk_c_dtypes_and_accumulate) {
    std::mt19937_64 rng = case_rng("nk_cacc");
    std::vector<int> counts = random_counts(200, 2, 6, rng, {0, 1, 3, 4});
    for (bool bt : {true, false}) {
        run_nk({.name = "c_fp32", .counts = counts, .n = 264, .k = 520, .b_transposed = bt,
                .c_dtype = MOEJIT_DTYPE_FP32});
        run_nk({.name = "acc_fp32", .counts = counts, .n = 264, .k = 520, .b_transposed = bt,
                .accumulate = true, .c_dtype = MOEJIT_DTYPE_FP32});
        run_nk({.name = "acc_bf16", .counts = counts, .n = 264, .k = 520, .b_transposed = bt,
                .accumulate = true});
    }
}

BOOST_AUTO_TEST_CASE(nk_fp16) {
    std::mt19937_64 rng = case_rng("nk_fp16");
    std::vector<int> counts = random_counts(256, 2, 8, rng);
    run_nk({.name = "fp16", .counts = counts, .n = 384, .k = 640, .dtype = MOEJIT_DTYPE_FP16,
            .c_dtype = MOEJIT_DTYPE_FP16});
    run_nk({.name = "fp16_bn_c32", .counts = counts, .n = 384, .k = 640, .b_transposed = false,
            .dtype = MOEJIT_DTYPE_FP16, .c_dtype = MOEJIT_DTYPE_FP32});
}

BOOST_AUTO_TEST_CASE(nk_every_tile_config) {
    std::mt19937_64 rng = case_rng("nk_zoo");
    std::vector<int> counts = random_counts(150, 4, 5, rng, {0, 2, 3, 4});
    for (const GemmTileConfig &t : tile_zoo())
        for (bool bt : {true, false})
            run_nk({.name = "zoo", .counts = counts, .n = 392, .k = 328, .b_transposed = bt, .tile = t});
}

// The op records into a CUDA graph: no host synchronisation inside.
BOOST_AUTO_TEST_CASE(nk_cuda_graph_capture) {
    std::mt19937_64 rng = case_rng("nk_graph");
    std::vector<int> counts = random_counts(256, 2, 8, rng);
    const std::vector<std::int32_t> offsets = offsets_from_counts(counts);
    const std::int64_t S = offsets.back(), N = 256, K = 256;
    HalfTensor a = random_half(static_cast<std::size_t>(S * K), MOEJIT_DTYPE_BF16, rng);
    HalfTensor b = random_half(static_cast<std::size_t>(8 * N * K), MOEJIT_DTYPE_BF16, rng);
    DeviceBuffer da = DeviceBuffer::from(a.bits), db = DeviceBuffer::from(b.bits);
    DeviceBuffer doff = DeviceBuffer::from(offsets), dc(static_cast<std::size_t>(S * N) * 4);
    moejit_group_gemm_nk_args_t args;
    MOEJIT_TEST_OK(moejit_group_gemm_nk_args_init(&args));
    args.c_dtype = MOEJIT_DTYPE_FP32;
    args.rows = S, args.n = N, args.k = K, args.num_experts = 8;
    args.a = da.get(), args.b = db.get(), args.c = dc.get();
    args.offsets = doff.as<const std::int32_t>();
    MOEJIT_TEST_OK(moejit_group_gemm_same_nk(gpu_context(), &args));  // compile + load first
    synchronize();
    dc.poison();

    CUstream stream = nullptr;
    MOEJIT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    args.stream = stream;
    CapturedGraph(stream, CU_STREAM_CAPTURE_MODE_GLOBAL, [&] {
        return moejit_group_gemm_same_nk(gpu_context(), &args);
    }).launch_and_wait();
    std::vector<float> out = dc.download<float>();
    std::vector<double> ref = reference::gemm_nk(a.values, b.values, offsets, S, N, K, true);
    std::vector<double> outd(out.begin(), out.end());
    BOOST_TEST(all_finite(outd));
    BOOST_TEST(relative_error(outd, ref) < 1e-4);
    MOEJIT_CU(cuStreamDestroy(stream));
}

// ================================================================ same_mn

BOOST_AUTO_TEST_CASE(mn_random_routing) {
    std::mt19937_64 rng = case_rng("mn_random_routing");
    std::vector<int> counts = random_counts(512, 4, 8, rng);
    run_mn({.name = "random_c32", .counts = counts, .m = 512, .n = 384});
    run_mn({.name = "random_cbf16", .counts = counts, .m = 384, .n = 512, .c_dtype = MOEJIT_DTYPE_BF16});
}

BOOST_AUTO_TEST_CASE(mn_seed_pattern_and_empty_experts) {
    // Expert 0 reduces over all 256 rows; experts 1..7 have none and must come out exactly 0.
    run_mn({.name = "seed", .counts = all_to_expert0(128, 2, 8), .m = 256, .n = 256});
    run_mn({.name = "seed_acc", .counts = all_to_expert0(128, 2, 8), .m = 256, .n = 256, .accumulate = true});
    std::mt19937_64 rng = case_rng("mn_empty");
    std::vector<int> counts = random_counts(300, 2, 10, rng, {1, 2, 5, 8});
    run_mn({.name = "empty_c32", .counts = counts, .m = 320, .n = 192});
    run_mn({.name = "empty_cbf16", .counts = counts, .m = 320, .n = 192, .c_dtype = MOEJIT_DTYPE_BF16});
    run_mn({.name = "empty_acc", .counts = counts, .m = 320, .n = 192, .accumulate = true});
}

BOOST_AUTO_TEST_CASE(mn_one_expert_k_equals_e_tiny) {
    run_mn({.name = "e1", .counts = {333}, .m = 256, .n = 320});
    run_mn({.name = "k_eq_e", .counts = {100, 100, 100}, .m = 256, .n = 256});
    run_mn({.name = "t1", .counts = {1, 0, 1, 0}, .m = 256, .n = 256});
    run_mn({.name = "t1_dup", .counts = {0, 2, 0, 0}, .m = 256, .n = 256});
    // T = 0: no rows at all; every expert's gradient is exactly 0 (or untouched).
    run_mn({.name = "t0", .counts = {0, 0, 0}, .m = 256, .n = 256});
    run_mn({.name = "t0_acc", .counts = {0, 0, 0}, .m = 256, .n = 256, .accumulate = true});
}

BOOST_AUTO_TEST_CASE(mn_ragged_h2880_i1408) {
    std::mt19937_64 rng = case_rng("mn_ragged");
    const std::int64_t H = 2880, I = 1408;
    std::vector<int> counts = random_counts(100, 2, 3, rng);
    run_mn({.name = "fc2_wgrad", .counts = counts, .m = H, .n = I});
    run_mn({.name = "fc1_wgrad", .counts = counts, .m = 2 * I, .n = H, .c_dtype = MOEJIT_DTYPE_BF16});
}

BOOST_AUTO_TEST_CASE(mn_fp16) {
    std::mt19937_64 rng = case_rng("mn_fp16");
    std::vector<int> counts = random_counts(200, 2, 4, rng);
    run_mn({.name = "fp16", .counts = counts, .m = 256, .n = 384, .dtype = MOEJIT_DTYPE_FP16,
            .c_dtype = MOEJIT_DTYPE_FP16});
    run_mn({.name = "fp16_acc", .counts = counts, .m = 256, .n = 384, .accumulate = true,
            .dtype = MOEJIT_DTYPE_FP16});
}

BOOST_AUTO_TEST_CASE(mn_every_tile_config) {
    std::mt19937_64 rng = case_rng("mn_zoo");
    std::vector<int> counts = random_counts(150, 2, 4, rng, {0, 1, 3});
    // The TMA-store epilogue (_e1) stages 16-bit C only.
    for (const GemmTileConfig &t : tile_zoo())
        run_mn({.name = "zoo", .counts = counts, .m = 392, .n = 328,
                .c_dtype = t.tma_store ? MOEJIT_DTYPE_BF16 : MOEJIT_DTYPE_FP32, .tile = t});
    // The heuristic with a 16-bit C (on sm_90a: the TMA-store epilogue), M and N ragged.
    run_mn({.name = "heuristic_bf16_c", .counts = counts, .m = 392, .n = 328, .c_dtype = MOEJIT_DTYPE_BF16});
    run_mn({.name = "heuristic_bf16_c_wide", .counts = random_counts(700, 2, 6, rng, {0, 2, 3, 5}), .m = 2880,
            .n = 1408, .c_dtype = MOEJIT_DTYPE_BF16});
}

// The split weight gradient (wgmma engine): an expert owning many rows is reduced in segments
// whose fp32 partials (NaN-poisoned workspace) are summed in order. All routes to one expert
// (the duplicate-route shape), a skewed mix with empty experts, segment lengths around the
// 64-row k-slice, bf16 and fp32 C, accumulate, the TMA-store epilogue on the unsplit experts.
BOOST_AUTO_TEST_CASE(mn_split_long_reductions) {
    if (internal_ctx().arch() != "sm_90a") {
        BOOST_TEST_MESSAGE("skipping: the split reduction belongs to the sm_90a wgmma engine");
        return;
    }
    std::mt19937_64 rng = case_rng("mn_split");
    std::vector<int> skewed = random_counts(200, 2, 6, rng, {1, 2, 4});
    skewed[2] += 3000;
    for (int split : {64, 192, 1024}) {
        const std::string tag = "_s" + std::to_string(split);
        run_mn({.name = "all_to_one" + tag, .counts = all_to_expert0(1500, 2, 4), .m = 264, .n = 200,
                .split = true, .split_rows = split});
        run_mn({.name = "skewed" + tag, .counts = skewed, .m = 392, .n = 328, .c_dtype = MOEJIT_DTYPE_BF16,
                .split = true, .split_rows = split});
        run_mn({.name = "skewed_acc" + tag, .counts = skewed, .m = 392, .n = 328, .accumulate = true,
                .split = true, .split_rows = split});
    }
    run_mn({.name = "e1_split", .counts = {5000}, .m = 128, .n = 256, .c_dtype = MOEJIT_DTYPE_BF16, .split = true, .split_rows = 320});
    run_mn({.name = "fp16_split", .counts = {0, 2100, 7}, .m = 136, .n = 72, .dtype = MOEJIT_DTYPE_FP16,
            .c_dtype = MOEJIT_DTYPE_FP16, .split = true, .split_rows = 256});
    // Ping-pong consumers on the split (partials from registers, TMA stores of unsplit experts).
    for (const char *pp : {"wgmma_128x128x64_s4_e1_p1", "wgmma_128x64x64_s3_p1"}) {
        const GemmTileConfig t = parse_tile_config(pp, "split");
        run_mn({.name = "pp_all_to_one", .counts = all_to_expert0(1500, 2, 4), .m = 264, .n = 200,
                .c_dtype = MOEJIT_DTYPE_BF16, .tile = t, .split = true, .split_rows = 192});
        run_mn({.name = "pp_skewed", .counts = skewed, .m = 392, .n = 328, .c_dtype = MOEJIT_DTYPE_BF16, .tile = t,
                .split = true, .split_rows = 64});
    }
    // The store ring on the split: partial tiles from registers between ring-stored tiles.
    for (const char *ring : {"wgmma_128x256x64_s4_e1_r1", "wgmma_128x128x64_s6_e1_r1"}) {
        const GemmTileConfig t = parse_tile_config(ring, "split");
        run_mn({.name = "ring_all_to_one", .counts = all_to_expert0(1500, 2, 4), .m = 264, .n = 200,
                .c_dtype = MOEJIT_DTYPE_BF16, .tile = t, .split = true, .split_rows = 192});
        run_mn({.name = "ring_skewed", .counts = skewed, .m = 392, .n = 328, .c_dtype = MOEJIT_DTYPE_BF16, .tile = t,
                .split = true, .split_rows = 64});
    }
    // Accumulating ping-pong weight gradients without the split, with empty experts (their
    // tiles take a turn with no k-slice).
    run_mn({.name = "pp_empty_acc", .counts = {0, 300, 0, 0, 77, 0}, .m = 392, .n = 328, .accumulate = true,
            .tile = parse_tile_config("wgmma_128x128x64_s4_p1", "pp")});
    run_mn({.name = "pp_skewed_acc", .counts = skewed, .m = 392, .n = 328, .accumulate = true,
            .tile = parse_tile_config("wgmma_128x128x64_s4_p1", "split"), .split = true, .split_rows = 1024});
    // More experts than the split reduction's block has threads (256): it finds the split
    // experts a block of experts at a time: split experts in both blocks (3 in the first, 256
    // and 299 first and last in the second), among small and empty ones.
    std::vector<int> many(300);
    std::uniform_int_distribution<int> few(0, 3);
    for (int &c : many) c = few(rng);
    for (int e : {3, 256, 299}) many[e] = 700;
    run_mn({.name = "many_experts_split", .counts = many, .m = 136, .n = 72, .c_dtype = MOEJIT_DTYPE_BF16,
            .split = true, .split_rows = 192});
    // The rule itself (-1) with a workspace: S = 12000 rows to one expert, 12 x 1 output tiles.
    run_mn({.name = "rule_split", .counts = all_to_expert0(6000, 2, 8), .m = 1536, .n = 256,
            .c_dtype = MOEJIT_DTYPE_BF16, .split = true});
}

// Offsets that go back and forth (corrupt routing) can ask for more split segments than the
// workspace holds (floor(2S / split_rows) partial tiles): here three experts each claim all S
// rows, 48 segments for 32 slots. The surplus partials are dropped: results may be wrong, but
// nothing lands past the workspace or C (a poisoned guard after each must stay poisoned).
BOOST_AUTO_TEST_CASE(mn_split_stays_inside_its_workspace) {
    if (internal_ctx().arch() != "sm_90a") {
        BOOST_TEST_MESSAGE("skipping: the split reduction belongs to the sm_90a wgmma engine");
        return;
    }
    constexpr std::int64_t S = 4096, M = 128, N = 256;
    constexpr int E = 5, split_rows = 256;
    const std::vector<std::int32_t> offsets = {0, S, 0, S, 0, S};
    std::mt19937_64 rng = case_rng("split_guard");
    HalfTensor a = random_half(static_cast<std::size_t>(S * M), MOEJIT_DTYPE_BF16, rng);
    HalfTensor b = random_half(static_cast<std::size_t>(S * N), MOEJIT_DTYPE_BF16, rng);
    DeviceBuffer da = DeviceBuffer::from(a.bits), db = DeviceBuffer::from(b.bits), doff = DeviceBuffer::from(offsets);
    const MnSplit split{split_rows, 2 * S / split_rows};
    const std::size_t ws_bytes = mn_split_workspace_bytes(split, E, M, N), c_bytes = E * M * N * 4;
    const std::size_t guard = M * N * 4;  // one partial tile
    DeviceBuffer workspace(ws_bytes + guard), c(c_bytes + guard);
    workspace.upload(std::vector<std::uint8_t>(ws_bytes + guard, 0xFF));
    c.upload(std::vector<std::uint8_t>(c_bytes + guard, 0xFF));
    GemmMnSpec spec = make_mn_spec(DType::bf16, DType::fp32, M, N, false, S, E,
                                   internal_ctx().compute_capability());
    GemmOperands ops{da.get(), db.get(), c.get(), doff.as<const std::int32_t>(), S, E, nullptr};
    ops.workspace = workspace.get();
    ops.workspace_bytes = ws_bytes;
    ops.split_rows = split_rows;
    launch_group_gemm_mn(internal_ctx(), spec, ops);
    synchronize();
    auto guard_intact = [](const std::vector<std::uint8_t> &bytes, std::size_t from) {
        return std::all_of(bytes.begin() + static_cast<std::ptrdiff_t>(from), bytes.end(),
                           [](std::uint8_t v) { return v == 0xFF; });
    };
    BOOST_TEST(guard_intact(workspace.download<std::uint8_t>(), ws_bytes), "nothing past the workspace");
    BOOST_TEST(guard_intact(c.download<std::uint8_t>(), c_bytes), "nothing past C");
}

// options->tune on a fresh context with its own cache folder: the first call of a problem times
// the candidates (one "tuned" log line), still computes the right result, and writes the winner
// to <folder>/tuning; later calls and a later context reuse it without timing anything (in this
// process from memory; tests/cpu/test_tuning_cpu.cpp shows a new store reading the files).
BOOST_AUTO_TEST_CASE(tuning_times_once_and_persists_the_winner) {
    moejit::test::TempDir dir("moejit-tune");
    static std::vector<std::string> tuned;
    tuned.clear();
    auto make_context = [&] {
        moejit_context_options_t o;
        MOEJIT_TEST_OK(moejit_context_options_init(&o));
        const std::string folder = dir.string();
        o.cache_dir = folder.c_str();
        o.tune = MOEJIT_SWITCH_ON;
        o.log_fn = [](moejit_log_level_t, const char *message, void *) {
            if (std::string(message).find("tuned") != std::string::npos) tuned.emplace_back(message);
        };
        moejit_context_t c = nullptr;
        MOEJIT_TEST_OK(moejit_context_create(&o, &c));
        return c;
    };
    std::mt19937_64 rng = case_rng("tuning");
    const std::vector<int> counts = random_counts(600, 2, 8, rng, {0, 1, 2, 4, 5, 7});
    moejit_context_t first = make_context();
    run_nk({.name = "tuned_nk", .counts = counts, .n = 768, .k = 1024, .context = first});
    BOOST_TEST(tuned.size() == 1u, "one problem tuned once (run_nk calls it twice)");
    run_mn({.name = "tuned_mn", .counts = counts, .m = 512, .n = 384, .c_dtype = MOEJIT_DTYPE_BF16, .context = first});
    BOOST_TEST(tuned.size() == 2u);
    for (const std::string &m : tuned) BOOST_TEST_MESSAGE(m);
    moejit_context_destroy(first);
    int files = 0;
    for (const auto &e : std::filesystem::recursive_directory_iterator(dir.path()))
        files += e.path().parent_path().filename() == "tuning" && e.path().extension() == ".txt";
    BOOST_TEST(files == 2);
    moejit_context_t later = make_context();
    run_nk({.name = "tuned_nk", .counts = counts, .n = 768, .k = 1024, .context = later});
    run_mn({.name = "tuned_mn", .counts = counts, .m = 512, .n = 384, .c_dtype = MOEJIT_DTYPE_BF16, .context = later});
    BOOST_TEST(tuned.size() == 2u, "the later context reused both winners");
    moejit_context_destroy(later);
}
