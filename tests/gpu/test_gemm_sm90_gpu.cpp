// The sm_90a (wgmma/TMA) same_nk grouped GEMM engine on a real Hopper device against the float64
// reference: random routing, every route to one expert (an expert with many more rows than a
// tile, and one owning all of S), empty experts, E = 1, T = 0 and T = 1, ragged N and K (not
// multiples of BLOCK_N / BLOCK_K = 64), every BLOCK_N, C in the operand dtype and fp32,
// accumulate, fp16, and enough tiles and k-slices that each CTA walks several tiles and the
// shared-memory ring wraps many times. C is NaN-poisoned first (accumulate: random prefill) and
// followed by a poisoned guard region that must stay untouched (rows past S are never stored);
// every element must be finite afterwards and bitwise identical across two runs.
// Skips (passes with a message) on a context that is not sm_90a.
#include "gpu_main.hpp"

#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>

#include "capi_convert.hpp"  // the cases' C dtypes, as the library's
#include "runtime/context.hpp"
#include "base/dtype.hpp"
#include "gemm/tile_config.hpp"
#include "gemm/group_gemm.hpp"
#include "ops/swiglu.hpp"
#include "expert_counts.hpp"
#include "reference_gemm.hpp"
#include "reference_swiglu.hpp"

MOEJIT_GPU_TEST_MAIN("gemm_sm90_gpu")

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

using namespace moejit;
using namespace moejit::test;

namespace {


bool hopper() { return hopper_or_skip("the kernel needs"); }

double tolerance(moejit_dtype_t c_dtype) { return c_dtype == MOEJIT_DTYPE_FP32 ? 1e-4 : 1e-2; }

struct Case {
    std::string name;
    std::vector<int> counts;  // rows per expert
    std::int64_t n = 256, k = 256;
    int block_n = 0;  // 0: the heuristic
    int stages = 0;   // 0: the heuristic
    bool accumulate = false;
    bool b_transposed = true;  // false: B [E,K,N] (input gradients)
    moejit_dtype_t dtype = MOEJIT_DTYPE_BF16;
    moejit_dtype_t c_dtype = MOEJIT_DTYPE_BF16;
    bool gather = false;  // A's rows gathered from a [T,K] source by a random row_token (duplicates)
    std::int64_t k_split = 0;  // > 0: A and B handed over as two operand pairs split at this k
    int pingpong = 0;          // ping-pong consumers, tile suffix _p1/_p2 (BLOCK_N 128 unless set)
    bool store_ring = false;   // the TMA-store epilogue through the store ring (_r1), deepest ring
};

// BLOCK_N = block_n with the deepest ring that fits (the heuristic's own search), else 2 stages.
void set_block_n(GemmNkSpec &spec, int block_n, int experts) {
    spec.tile.block_n = block_n;
    const int stages = deepest_stages(spec.tile, GemmKind::same_nk, experts, internal_ctx().compute_capability(), 3);
    spec.tile.stages = stages > 0 ? stages : 2;
}

// The heuristic's wgmma spec, with the case's BLOCK_N and stages when it sets them.
GemmNkSpec wgmma_spec(const Case &tc, int experts) {
    const int cc = internal_ctx().compute_capability();
    GemmNkSpec spec = make_nk_spec(to_internal(tc.dtype), to_internal(tc.c_dtype), tc.n, tc.k, tc.b_transposed, tc.accumulate, 0, experts, cc);
    BOOST_REQUIRE_MESSAGE(spec.tile.engine == GemmEngine::wgmma, "the heuristic picks wgmma on sm_90a");
    spec.tile.pingpong = tc.pingpong;
    if (tc.block_n || tc.pingpong) set_block_n(spec, tc.block_n ? tc.block_n : 128, experts);
    if (tc.store_ring) {
        BOOST_REQUIRE_MESSAGE(spec.tile.tma_store, "the store ring needs the TMA-store epilogue: " << to_string(spec.tile));
        spec.tile.store_ring = true;
        set_block_n(spec, spec.tile.block_n, experts);
    }
    if (tc.stages) spec.tile.stages = tc.stages;
    return spec;
}

constexpr std::size_t kGuardRows = 130;  // > BLOCK_M: a whole stray tile past S would show

void run(const Case &tc) {
    const int E = static_cast<int>(tc.counts.size());
    GemmNkSpec spec = wgmma_spec(tc, E);
    spec.gather_a = tc.gather;
    spec.k_split = tc.k_split;
    BOOST_TEST_CONTEXT("case " << tc.name << " kernel " << render_group_gemm_nk(spec).name) {
        BOOST_TEST(spec.tile.store_ring == tc.store_ring, "the ring variant is the one run");
        std::mt19937_64 rng = case_rng(tc.name + std::to_string(spec.tile.block_n));
        const std::vector<std::int32_t> offsets = offsets_from_counts(tc.counts);
        const std::int64_t S = offsets[E], N = tc.n, K = tc.k;
        const std::size_t c_elem = dtype_size(to_internal(tc.c_dtype));
        const std::size_t c_count = static_cast<std::size_t>(S * N);
        HalfTensor a = random_half(static_cast<std::size_t>(S * K), tc.dtype, rng);
        HalfTensor b = random_half(static_cast<std::size_t>(E * N * K), tc.dtype, rng);
        // Gathered: scattered row s of A is row row_token[s] of a [T,K] source, T < S so rows
        // repeat (duplicate routes); `a` becomes the gathered matrix the reference multiplies.
        std::vector<std::int32_t> row_token(1, 0);
        HalfTensor a_source;
        if (tc.gather) {
            const std::int64_t T = S / 3 + 1;
            a_source = random_half(static_cast<std::size_t>(T * K), tc.dtype, rng);
            std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(T - 1));
            row_token.assign(static_cast<std::size_t>(S) + 1, 0);
            for (std::int64_t s = 0; s < S; ++s) {
                row_token[s] = pick(rng);
                std::copy_n(a_source.values.begin() + row_token[s] * K, K, a.values.begin() + s * K);
            }
        }
        // Two operand pairs: A's columns and B's k-range cut at k_split into separate tensors
        // (a1 [S,K1], a2 [S,K2]; b1, b2 each in B's layout over its own K).
        std::vector<std::uint16_t> a_bits = tc.gather ? a_source.bits : a.bits, b_bits = b.bits, a2_bits{0}, b2_bits{0};
        if (tc.k_split > 0) {
            const std::int64_t K1 = tc.k_split, K2 = K - K1;
            a_bits.assign(static_cast<std::size_t>(S * K1), 0);
            a2_bits.assign(static_cast<std::size_t>(S * K2), 0);
            for (std::int64_t s = 0; s < S; ++s)
                for (std::int64_t kk = 0; kk < K; ++kk)
                    (kk < K1 ? a_bits[s * K1 + kk] : a2_bits[s * K2 + kk - K1]) = a.bits[s * K + kk];
            b_bits.assign(static_cast<std::size_t>(E * N * K1), 0);
            b2_bits.assign(static_cast<std::size_t>(E * N * K2), 0);
            for (std::int64_t e = 0; e < E; ++e)
                for (std::int64_t nn = 0; nn < N; ++nn)
                    for (std::int64_t kk = 0; kk < K; ++kk) {
                        // b_transposed: [E,N,K]; else [E,K,N].
                        const std::uint16_t v = b.bits[tc.b_transposed ? (e * N + nn) * K + kk : (e * K + kk) * N + nn];
                        if (kk < K1)
                            b_bits[tc.b_transposed ? (e * N + nn) * K1 + kk : (e * K1 + kk) * N + nn] = v;
                        else
                            b2_bits[tc.b_transposed ? (e * N + nn) * K2 + kk - K1 : (e * K2 + kk - K1) * N + nn] = v;
                    }
        }
        DeviceBuffer da = DeviceBuffer::from(a_bits), db = DeviceBuffer::from(b_bits);
        DeviceBuffer da2 = DeviceBuffer::from(a2_bits), db2 = DeviceBuffer::from(b2_bits);
        DeviceBuffer dtoken = DeviceBuffer::from(row_token);
        DeviceBuffer doff = DeviceBuffer::from(offsets);
        // C, then kGuardRows poisoned rows that must stay poisoned.
        const std::size_t guard_bytes = kGuardRows * static_cast<std::size_t>(N) * c_elem;
        DeviceBuffer dc(c_count * c_elem + guard_bytes);
        std::vector<std::uint8_t> initial(c_count * c_elem + guard_bytes, 0xFF);
        std::vector<double> prefill(c_count, 0.0);
        if (tc.accumulate) {
            if (tc.c_dtype == MOEJIT_DTYPE_FP32) {
                std::normal_distribution<float> dist(0.0f, 1.0f);
                for (std::size_t i = 0; i < c_count; ++i) {
                    const float v = dist(rng);
                    prefill[i] = v;
                    std::memcpy(&initial[i * 4], &v, 4);
                }
            } else {
                HalfTensor p = random_half(c_count, tc.c_dtype, rng);
                prefill = p.values;
                if (c_count) std::memcpy(initial.data(), p.bits.data(), c_count * 2);
            }
        }

        GemmOperands ops;
        ops.a = S ? da.get() : nullptr;
        ops.b = db.get();
        ops.c = S ? dc.get() : nullptr;
        ops.offsets = doff.as<const std::int32_t>();
        ops.rows = S;
        ops.num_experts = E;
        ops.row_token = dtoken.as<const std::int32_t>();
        if (tc.k_split > 0) {
            ops.a2 = da2.get();
            ops.b2 = db2.get();
        }
        auto launch = [&] {
            dc.upload(initial);
            launch_group_gemm_nk(internal_ctx(), spec, ops);
            synchronize();
        };
        launch();
        const std::vector<std::uint8_t> first = dc.download<std::uint8_t>();
        std::vector<double> out(c_count);
        for (std::size_t i = 0; i < c_count; ++i) {
            if (tc.c_dtype == MOEJIT_DTYPE_FP32) {
                float f;
                std::memcpy(&f, &first[i * 4], 4);
                out[i] = f;
            } else {
                std::uint16_t h;
                std::memcpy(&h, &first[i * 2], 2);
                out[i] = from_half_bits(h, tc.c_dtype);
            }
        }
        bool guard_intact = true;
        for (std::size_t i = c_count * c_elem; i < first.size(); ++i) guard_intact &= first[i] == 0xFF;
        BOOST_TEST(guard_intact, "nothing is written past row S");

        std::vector<double> ref = reference::gemm_nk(a.values, b.values, offsets, S, N, K, tc.b_transposed);
        for (std::size_t i = 0; i < ref.size(); ++i) ref[i] += prefill[i];
        BOOST_TEST(all_finite(out), "every element of C is written (NaN-poisoned before)");
        const double err = relative_error(out, ref);
        BOOST_TEST(err < tolerance(tc.c_dtype), "relative error " << err);
        // Row by row, reported per expert: a wrong expert or a tail tile spilling into the next
        // expert's rows shows here even when the global error is small.
        for (int e = 0; e < E; ++e) {
            double worst = 0;
            for (std::int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
                std::vector<double> o(out.begin() + r * N, out.begin() + (r + 1) * N);
                std::vector<double> f(ref.begin() + r * N, ref.begin() + (r + 1) * N);
                worst = std::max(worst, relative_error(o, f));
            }
            BOOST_TEST(worst < 3 * tolerance(tc.c_dtype), "expert " << e << " worst row error " << worst);
        }
        launch();
        BOOST_TEST((dc.download<std::uint8_t>() == first), "bitwise identical across two runs");
    }
}


// fc1 with the SwiGLU epilogue: one GEMM over N = 2I writes g, u and aw = silu(g')·u'·w_s.
struct GluCase {
    std::string name;
    std::vector<int> counts;
    std::int64_t I = 256, K = 256;
    bool merged = false;
    float limit = 0.0f;
    bool gather = false;
    int block_n = 0;  // 0: the heuristic
    bool registers = false;  // g and u stored from registers (no TMA store) even where TMA could
    bool store_ring = false;  // g and u (and aw at BN 256) through the store ring (_r1)
};

void run_glu(const GluCase &tc) {
    const int E = static_cast<int>(tc.counts.size());
    const int cc = internal_ctx().compute_capability();
    const moejit_dtype_t dt = MOEJIT_DTYPE_BF16;
    GemmNkSpec spec;
    spec.n = 2 * tc.I;
    spec.k = tc.K;
    spec.swiglu.on = true;
    spec.swiglu.limit = tc.limit > 0;
    spec.swiglu.merged = tc.merged;
    spec.gather_a = tc.gather;
    spec = with_chosen_tile(spec, 0, E, cc);
    BOOST_REQUIRE_MESSAGE(spec.tile.engine == GemmEngine::wgmma, to_string(spec.tile));
    if (tc.block_n) {
        spec.tile.tma_store = tc.block_n >= 128;  // the epilogue's TMA stores need whole 64-column chunks
        set_block_n(spec, tc.block_n, E);
    }
    if (tc.store_ring) {
        BOOST_REQUIRE_MESSAGE(spec.tile.tma_store, "the store ring needs the TMA-store epilogue: " << to_string(spec.tile));
        spec.tile.store_ring = true;
        set_block_n(spec, spec.tile.block_n, E);
        BOOST_TEST(render_group_gemm_nk(spec).name.find("_r1") != std::string::npos, "the ring variant is the one run");
    }
    if (tc.registers) spec.tile.tma_store = false;
    BOOST_TEST_CONTEXT("case " << tc.name << " kernel " << render_group_gemm_nk(spec).name) {
        std::mt19937_64 rng = case_rng(tc.name);
        const std::vector<std::int32_t> offsets = offsets_from_counts(tc.counts);
        const std::int64_t S = offsets[E], I = tc.I, K = tc.K;
        const auto SI = static_cast<std::size_t>(S * I);
        // Inputs scaled so that g and u reach past the limit (about a third of them at L = 1.5).
        HalfTensor a = random_half(static_cast<std::size_t>(S * K), dt, rng);
        HalfTensor wg = random_half(static_cast<std::size_t>(E * I * K), dt, rng, 0.1f);
        HalfTensor wu = random_half(static_cast<std::size_t>(E * I * K), dt, rng, 0.1f);
        std::vector<double> w_s(static_cast<std::size_t>(S));
        std::vector<float> w_s_f(w_s.size() + 1, 0.0f);
        std::uniform_real_distribution<float> wd(0.05f, 1.0f);
        for (std::size_t i = 0; i < w_s.size(); ++i) w_s[i] = w_s_f[i] = wd(rng);
        // B as [E, 2I, K]: each expert's gate rows, then its up rows (the merged layout).
        std::vector<double> b_ref(static_cast<std::size_t>(E * 2 * I * K));
        std::vector<std::uint16_t> merged_bits(b_ref.size());
        for (std::int64_t e = 0; e < E; ++e)
            for (std::int64_t r = 0; r < 2 * I; ++r)
                for (std::int64_t k = 0; k < K; ++k) {
                    const HalfTensor &w = r < I ? wg : wu;
                    const auto src = static_cast<std::size_t>((e * I + r % I) * K + k);
                    const auto dst = static_cast<std::size_t>((e * 2 * I + r) * K + k);
                    b_ref[dst] = w.values[src];
                    merged_bits[dst] = w.bits[src];
                }
        // Gathered: scattered row s is row row_token[s] of a [T, K] source (rows repeat).
        std::vector<std::int32_t> row_token(static_cast<std::size_t>(S) + 1, 0);
        std::vector<std::uint16_t> a_bits = a.bits;
        if (tc.gather) {
            const std::int64_t T = S / 2 + 1;
            HalfTensor src = random_half(static_cast<std::size_t>(T * K), dt, rng);
            std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(T - 1));
            for (std::int64_t r = 0; r < S; ++r) {
                row_token[r] = pick(rng);
                std::copy_n(src.values.begin() + row_token[r] * K, K, a.values.begin() + r * K);
            }
            a_bits = src.bits;
        }
        const std::vector<double> gu_ref = reference::gemm_nk(a.values, b_ref, offsets, S, 2 * I, K, true);

        DeviceBuffer da = DeviceBuffer::from(a_bits), dtoken = DeviceBuffer::from(row_token);
        DeviceBuffer dwg = DeviceBuffer::from(tc.merged ? merged_bits : wg.bits), dwu = DeviceBuffer::from(wu.bits);
        DeviceBuffer dws = DeviceBuffer::from(w_s_f), doff = DeviceBuffer::from(offsets);
        // gate_up: g then u ([S,I] each) or [S,2I]; aw [S,I]; each followed by poisoned guard rows.
        const std::size_t guard = kGuardRows * static_cast<std::size_t>(2 * I);
        DeviceBuffer dgu((2 * SI + guard) * 2), daw((SI + guard) * 2);
        const std::vector<std::uint16_t> poison_gu(2 * SI + guard, 0xFFFF), poison_aw(SI + guard, 0xFFFF);
        auto *gu = static_cast<std::uint16_t *>(dgu.get());
        GemmOperands ops;
        ops.a = da.get();
        ops.b = dwg.get();
        ops.b2 = tc.merged ? nullptr : dwu.get();
        ops.c = gu;
        ops.offsets = doff.as<const std::int32_t>();
        ops.rows = S;
        ops.num_experts = E;
        ops.row_token = dtoken.as<const std::int32_t>();
        ops.glu.up = tc.merged ? gu + I : gu + SI;
        ops.glu.aw = daw.get();
        ops.glu.w_s = dws.as<const float>();
        ops.glu.limit = tc.limit;
        auto launch = [&] {
            dgu.upload(poison_gu);
            daw.upload(poison_aw);
            launch_group_gemm_nk(internal_ctx(), spec, ops);
            synchronize();
        };
        launch();
        const std::vector<std::uint16_t> gu_bits = dgu.download<std::uint16_t>(), aw_bits = daw.download<std::uint16_t>();
        bool guards = true;
        for (std::size_t i = 2 * SI; i < gu_bits.size(); ++i) guards &= gu_bits[i] == 0xFFFF;
        for (std::size_t i = SI; i < aw_bits.size(); ++i) guards &= aw_bits[i] == 0xFFFF;
        BOOST_TEST(guards, "nothing is written past row S");
        // g and u in [S, I] each, whatever the layout.
        std::vector<double> g(SI), u(SI), g_ref(SI), u_ref(SI), aw(SI);
        for (std::int64_t r = 0; r < S; ++r)
            for (std::int64_t i = 0; i < I; ++i) {
                const auto at = static_cast<std::size_t>(r * I + i);
                const std::size_t gi = tc.merged ? static_cast<std::size_t>(r * 2 * I + i) : at;
                const std::size_t ui = tc.merged ? gi + static_cast<std::size_t>(I) : SI + at;
                g[at] = from_half_bits(gu_bits[gi], dt);
                u[at] = from_half_bits(gu_bits[ui], dt);
                g_ref[at] = gu_ref[static_cast<std::size_t>(r * 2 * I + i)];
                u_ref[at] = gu_ref[static_cast<std::size_t>(r * 2 * I + I + i)];
                aw[at] = from_half_bits(aw_bits[at], dt);
            }
        BOOST_TEST(all_finite(g), "g fully written");
        BOOST_TEST(all_finite(u), "u fully written");
        BOOST_TEST(all_finite(aw), "aw fully written");
        BOOST_TEST(relative_error(g, g_ref) < 1e-2, "g error " << relative_error(g, g_ref));
        BOOST_TEST(relative_error(u, u_ref) < 1e-2, "u error " << relative_error(u, u_ref));
        const double limit = tc.limit;
        const std::vector<double> aw_ref = swiglu_forward_ref(g_ref, u_ref, w_s, S, I, limit).aw;
        BOOST_TEST(relative_error(aw, aw_ref) < 1e-2, "aw error " << relative_error(aw, aw_ref));
        // The standalone SwiGLU kernel on the fused kernel's g and u gives bitwise the same aw.
        if (S > 0) {
            DeviceBuffer aw2(SI * 2);
            SwigluForwardArgs act;
            act.dtype = to_internal(dt);
            act.rows = S;
            act.intermediate = I;
            act.merged = tc.merged;
            act.limit = tc.limit;
            act.gate = tc.merged ? nullptr : gu;
            act.up = tc.merged ? nullptr : gu + SI;
            act.gate_up = tc.merged ? gu : nullptr;
            act.w_s = dws.as<const float>();
            act.aw = aw2.get();
            swiglu_forward(internal_ctx(), act);
            synchronize();
            const std::vector<std::uint16_t> aw2_bits = aw2.download<std::uint16_t>();
            BOOST_TEST(std::equal(aw2_bits.begin(), aw2_bits.end(), aw_bits.begin()),
                       "aw bitwise equal to the standalone SwiGLU kernel's");
        }
        launch();
        BOOST_TEST((dgu.download<std::uint16_t>() == gu_bits), "g, u bitwise identical across two runs");
        BOOST_TEST((daw.download<std::uint16_t>() == aw_bits), "aw bitwise identical across two runs");
    }
}

}  // namespace


BOOST_AUTO_TEST_CASE(random_routing_every_block_n) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("random");
    const std::vector<int> counts = random_counts(512, 4, 16, rng);
    for (int bn : {64, 128, 256}) run({.name = "random", .counts = counts, .block_n = bn});
}

BOOST_AUTO_TEST_CASE(all_routes_to_one_expert) {
    if (!hopper()) return;
    // The seed pattern: T=128, k=2, every route to expert 0 (two full M tiles of one expert).
    for (int E : {1, 8}) run({.name = "seed_e" + std::to_string(E), .counts = all_to_expert(256, E, 0)});
    // One expert (the last) owns all of S = T*k = 8000 rows: many tiles per CTA.
    run({.name = "all_to_last", .counts = all_to_expert(8000, 8, 7), .n = 512, .k = 512});
}

BOOST_AUTO_TEST_CASE(empty_experts) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("empty");
    run({.name = "empty_experts", .counts = random_counts(300, 2, 12, rng, {1, 3, 5, 7, 9}),
         .n = 384, .k = 512});
    run({.name = "leading_trailing_empty", .counts = {0, 0, 77, 0, 129, 0, 0}, .n = 256, .k = 192});
}

BOOST_AUTO_TEST_CASE(one_expert_and_tiny_batches) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("tiny");
    run({.name = "e1", .counts = {300}, .n = 320, .k = 448});
    run({.name = "t1", .counts = random_counts(1, 2, 4, rng)});  // T = 1, k = 2
    run({.name = "t1_dup", .counts = {0, 0, 2, 0}});             // both routes to expert 2
    run({.name = "one_row", .counts = {0, 1, 0}, .n = 64, .k = 64});
    // T = 0: nothing is launched, null tensors accepted.
    GemmNkSpec spec = wgmma_spec({.name = "t0", .counts = {0, 0, 0, 0}}, 4);
    DeviceBuffer doff = DeviceBuffer::from(std::vector<std::int32_t>(5, 0));
    GemmOperands ops;
    ops.offsets = doff.as<const std::int32_t>();
    ops.rows = 0;
    ops.num_experts = 4;
    BOOST_CHECK_NO_THROW(launch_group_gemm_nk(internal_ctx(), spec, ops));
    synchronize();
}

BOOST_AUTO_TEST_CASE(ragged_n_and_k) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("ragged");
    const std::vector<int> counts = random_counts(200, 2, 6, rng, {0, 1, 3, 4});
    // N not a multiple of any BLOCK_N, K not a multiple of BLOCK_K = 64 (TMA zero-fills both).
    for (int bn : {64, 128, 256}) run({.name = "n264_k520", .counts = counts, .n = 264, .k = 520, .block_n = bn});
    run({.name = "k8", .counts = counts, .n = 136, .k = 8});
    run({.name = "k72", .counts = counts, .n = 200, .k = 72});
    // The gpt-oss-like ragged shapes: H = 2880, I = 1408 (fc1 N = 2I, fc2 N = H).
    const std::vector<int> c2 = random_counts(80, 4, 4, rng);
    run({.name = "fc1_fprop", .counts = c2, .n = 2 * 1408, .k = 2880});
    run({.name = "fc2_fprop", .counts = c2, .n = 2880, .k = 1408});
}

BOOST_AUTO_TEST_CASE(c_dtypes_accumulate_fp16) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("dtypes");
    const std::vector<int> counts = random_counts(200, 2, 6, rng, {0, 1, 3, 4});
    run({.name = "c_fp32", .counts = counts, .n = 264, .k = 520, .c_dtype = MOEJIT_DTYPE_FP32});
    run({.name = "acc_fp32", .counts = counts, .n = 264, .k = 520, .accumulate = true,
         .c_dtype = MOEJIT_DTYPE_FP32});
    run({.name = "acc_bf16", .counts = counts, .n = 264, .k = 520, .accumulate = true});
    run({.name = "fp16", .counts = counts, .n = 384, .k = 640, .dtype = MOEJIT_DTYPE_FP16,
         .c_dtype = MOEJIT_DTYPE_FP16});
    run({.name = "fp16_c32", .counts = counts, .n = 384, .k = 640, .dtype = MOEJIT_DTYPE_FP16,
         .c_dtype = MOEJIT_DTYPE_FP32});
}

BOOST_AUTO_TEST_CASE(ring_wraps_across_tiles) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("ring");
    const std::vector<int> counts = random_counts(1024, 8, 32, rng);  // S = 8192, E = 32
    // One k-slice per tile (K = 64 < stages): the ring's phase flips between tiles.
    run({.name = "k64_many_tiles", .counts = counts, .n = 1024, .k = 64});
    // Many k-slices per tile, shallow and deep rings.
    for (int stages : {2, 3, 6})
        run({.name = "k1024_s" + std::to_string(stages), .counts = counts, .n = 512, .k = 1024,
             .block_n = 128, .stages = stages});
}

// B [E,K,N] (the input gradients' layout): MN-major B tiles, transpose-B wgmma.
BOOST_AUTO_TEST_CASE(input_gradient_layout) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("bn");
    const std::vector<int> counts = random_counts(300, 4, 12, rng, {0, 1, 2, 5, 6, 7, 11});
    for (int bn : {64, 128, 256})
        run({.name = "bn_random", .counts = counts, .n = 264, .k = 520, .block_n = bn, .b_transposed = false});
    run({.name = "bn_seed", .counts = all_to_expert(256, 8, 0), .b_transposed = false});
    run({.name = "bn_h2880", .counts = random_counts(80, 4, 4, rng), .n = 2880, .k = 1408, .b_transposed = false});
    run({.name = "bn_acc_c32", .counts = counts, .n = 136, .k = 72, .accumulate = true, .b_transposed = false,
         .c_dtype = MOEJIT_DTYPE_FP32});
    run({.name = "bn_fp16", .counts = counts, .n = 384, .k = 640, .b_transposed = false,
         .dtype = MOEJIT_DTYPE_FP16, .c_dtype = MOEJIT_DTYPE_FP16});
}

// A's rows gathered by row_token (the layer's fc1 and fc2 dgrad read x and dout this way): the
// producer warpgroup's cp.async copies into the swizzled ring. Random routing with every
// BLOCK_N, every route to one expert, empty experts, T = 1 with both routes to one expert,
// ragged N and K, both B layouts, shallow and deep rings, fp16 and fp32 C.
BOOST_AUTO_TEST_CASE(gathered_a_rows) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("gather");
    const std::vector<int> counts = random_counts(300, 4, 12, rng, {0, 1, 2, 5, 6, 7, 11});
    for (int bn : {64, 128, 256})
        run({.name = "g_random", .counts = counts, .n = 264, .k = 520, .block_n = bn, .gather = true});
    run({.name = "g_all_to_last", .counts = all_to_expert(4000, 8, 7), .n = 512, .k = 512, .gather = true});
    run({.name = "g_t1_dup", .counts = {0, 0, 2, 0}, .gather = true});
    run({.name = "g_one_row", .counts = {0, 1, 0}, .n = 64, .k = 64, .gather = true});
    run({.name = "g_k8", .counts = counts, .n = 136, .k = 8, .gather = true});
    run({.name = "g_bn", .counts = counts, .n = 264, .k = 520, .b_transposed = false, .gather = true});
    for (int stages : {2, 6})
        run({.name = "g_s" + std::to_string(stages), .counts = random_counts(1024, 8, 32, rng), .n = 512,
             .k = 1024, .block_n = 128, .stages = stages, .gather = true});
    run({.name = "g_fp16_c32", .counts = counts, .n = 384, .k = 640, .accumulate = true, .dtype = MOEJIT_DTYPE_FP16,
         .c_dtype = MOEJIT_DTYPE_FP32, .gather = true});
}

// K reduced over two operand pairs in one accumulation (split fc1's dgrad: dg·W_gate + du·W_up):
// random routing at every BLOCK_N, both B layouts, one k-slice in the first pair and ragged K
// in the second, every route to one expert, empty experts, T = 1, fp32 C accumulating.
BOOST_AUTO_TEST_CASE(two_operand_pairs) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("pairs");
    const std::vector<int> counts = random_counts(300, 4, 12, rng, {0, 1, 2, 5, 6, 7, 11});
    for (int bn : {64, 128, 256})
        run({.name = "p_random", .counts = counts, .n = 264, .k = 512, .block_n = bn, .b_transposed = false,
             .k_split = 256});
    run({.name = "p_bt_one_slice", .counts = counts, .n = 136, .k = 200, .k_split = 64});
    run({.name = "p_all_to_one", .counts = all_to_expert(4000, 8, 3), .n = 512, .k = 1536, .b_transposed = false,
         .k_split = 768});
    run({.name = "p_t1", .counts = {0, 1, 0, 0}, .n = 64, .k = 128, .b_transposed = false, .k_split = 64});
    run({.name = "p_acc_c32", .counts = counts, .n = 136, .k = 392, .accumulate = true, .b_transposed = false,
         .c_dtype = MOEJIT_DTYPE_FP32, .k_split = 320});
}

// The cases every consumer variant runs, named PREFIX_*, with `variant` setting the variant's
// fields on each: random routing (`counts`) at each of `block_ns`, every route to the last
// expert, empty experts, T = 1 with a duplicate route, many short-K tiles (`many`), B as
// [E,K,N], two operand pairs and fp16.
template <class Variant>
void run_variant_cases(const std::string &prefix, const std::vector<int> &counts, const std::vector<int> &many,
                       std::initializer_list<int> block_ns, Variant variant) {
    auto with = [&](Case c) {
        c.name = prefix + "_" + c.name;
        variant(c);
        run(c);
    };
    for (int bn : block_ns) with({.name = "random", .counts = counts, .n = 264, .k = 520, .block_n = bn});
    with({.name = "all_to_last", .counts = all_to_expert(8000, 8, 7), .n = 512, .k = 512});
    with({.name = "empty", .counts = {0, 0, 77, 0, 129, 0, 0}, .n = 256, .k = 192});
    with({.name = "t1_dup", .counts = {0, 0, 2, 0}});
    with({.name = "k64_many_tiles", .counts = many, .n = 1024, .k = 64});
    with({.name = "bn", .counts = counts, .n = 264, .k = 520, .b_transposed = false});
    with({.name = "pairs", .counts = counts, .n = 264, .k = 512, .b_transposed = false, .k_split = 256});
    with({.name = "fp16", .counts = counts, .n = 384, .k = 640, .dtype = MOEJIT_DTYPE_FP16, .c_dtype = MOEJIT_DTYPE_FP16});
}

// Ping-pong consumers (each warpgroup owns whole tiles, the two take turns): random routing at
// both BLOCK_N, every route to one expert (many tiles per CTA), empty experts, T = 1, ragged N
// and K, one k-slice per tile (the ring's phase flips between the two consumers' tiles), shallow
// and deep rings, both B layouts, gathered rows, two operand pairs, fp32 and accumulated C (the
// register epilogue) and the TMA stores of partial tiles.
BOOST_AUTO_TEST_CASE(pingpong_consumers) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("pingpong");
    const std::vector<int> counts = random_counts(300, 4, 12, rng, {0, 1, 2, 5, 6, 7, 11});
    const std::vector<int> many = random_counts(1024, 8, 32, rng);
    run_variant_cases("pp", counts, many, {64, 128}, [](Case &c) { c.pingpong = 1; });
    run({.name = "pp_one_row", .counts = {0, 1, 0}, .n = 64, .k = 64, .pingpong = true});
    for (int stages : {2, 5})
        run({.name = "pp_k1024_s" + std::to_string(stages), .counts = many, .n = 512, .k = 1024, .stages = stages,
             .pingpong = true});
    run({.name = "pp_gather", .counts = counts, .n = 264, .k = 520, .gather = true, .pingpong = true});
    run({.name = "pp_gather_all_to_last", .counts = all_to_expert(4000, 8, 7), .n = 512, .k = 512, .gather = true,
         .pingpong = true});
    run({.name = "pp_c32", .counts = counts, .n = 264, .k = 520, .c_dtype = MOEJIT_DTYPE_FP32, .pingpong = true});
    run({.name = "pp_acc_bf16", .counts = counts, .n = 264, .k = 520, .accumulate = true, .pingpong = true});
    // _p2: each row block's k-slice issued whole.
    run({.name = "pp2_random", .counts = counts, .n = 264, .k = 520, .pingpong = 2});
    run({.name = "pp2_bn_gather", .counts = counts, .n = 264, .k = 520, .b_transposed = false, .gather = true,
         .pingpong = 2});
}

// The store ring (_r1): C leaves in 64 x 64 chunks through two slots per consumer, one store
// group per chunk; many short-K tiles per CTA wrap the ring across tiles. Every BLOCK_N, ragged N
// and tails (the register path for partial row blocks), gathered rows, two operand pairs, fp16,
// every route to one expert, empty experts, T = 1, and the SwiGLU epilogue's g and u.
BOOST_AUTO_TEST_CASE(store_ring) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("store_ring");
    const std::vector<int> counts = random_counts(300, 4, 12, rng, {0, 1, 2, 5, 6, 7, 11});
    const std::vector<int> many = random_counts(1024, 8, 32, rng);
    run_variant_cases("ring", counts, many, {64, 128, 256}, [](Case &c) { c.store_ring = true; });
    run({.name = "ring_tails", .counts = {1, 129, 63, 191, 64, 256 + 64, 0, 37, 65, 128 + 65}, .n = 264, .k = 320,
         .store_ring = true});
    run({.name = "ring_gather", .counts = counts, .n = 768, .k = 512, .gather = true, .store_ring = true});
    for (int bn : {128, 256})
        run_glu({.name = "ring_glu_bn" + std::to_string(bn), .counts = counts, .I = 200, .K = 320, .block_n = bn,
                 .store_ring = true});
    run_glu({.name = "ring_glu_merged_gather", .counts = counts, .I = 768, .K = 256, .merged = true, .gather = true,
             .store_ring = true});
    run_glu({.name = "ring_glu_all_to_one", .counts = all_to_expert(3000, 8, 5), .I = 256, .K = 256, .gather = true,
             .store_ring = true});
    run_glu({.name = "ring_glu_limit_bn256", .counts = counts, .I = 264, .K = 512, .limit = 1.5f, .block_n = 256,
             .store_ring = true});
}

// fc1 with the SwiGLU epilogue: split and merged weights, with and without a limit, gathered
// rows, every BLOCK_N (ragged I against BN/2), TMA and register stores of g and u, every route
// to one expert, empty experts, T = 1.
BOOST_AUTO_TEST_CASE(swiglu_epilogue) {
    if (!hopper()) return;
    std::mt19937_64 rng = case_rng("glu");
    const std::vector<int> counts = random_counts(300, 4, 12, rng, {0, 1, 2, 5, 6, 7, 11});
    for (int bn : {64, 128, 256})
        run_glu({.name = "glu_bn" + std::to_string(bn), .counts = counts, .I = 200, .K = 320, .block_n = bn});
    run_glu({.name = "glu_merged", .counts = counts, .I = 200, .K = 320, .merged = true});
    run_glu({.name = "glu_merged_registers", .counts = counts, .I = 200, .K = 320, .merged = true, .registers = true});
    run_glu({.name = "glu_limit", .counts = counts, .I = 256, .K = 512, .limit = 1.5f});
    run_glu({.name = "glu_merged_limit_gather", .counts = counts, .I = 136, .K = 256, .merged = true, .limit = 1.5f,
             .gather = true});
    run_glu({.name = "glu_gather", .counts = counts, .I = 768, .K = 128, .gather = true});
    run_glu({.name = "glu_all_to_one", .counts = all_to_expert(3000, 8, 5), .I = 256, .K = 256, .gather = true});
    run_glu({.name = "glu_t1", .counts = {0, 0, 1, 0}, .I = 64, .K = 64});
}

// Ragged expert tails: experts ending 1, 63, 64 or 65 rows past a multiple of 128 (or with
// fewer than 64 rows in all), so the second consumer's 64 rows of a last tile are missing or
// partly there, at both BLOCK_N, both B layouts, ragged N, gathered rows, two operand pairs,
// fp32 and accumulated C. (0.9's m64 x BN/2 "half tiles" for such tails ran here and passed, but
// slowed the layer: docs/PERF_LOG.md 0.9.0.)
BOOST_AUTO_TEST_CASE(ragged_tails) {
    if (!hopper()) return;
    const std::vector<int> tails = {1, 129, 63, 191, 64, 256 + 64, 0, 37, 65, 128 + 65};
    for (int bn : {128, 256}) {
        run({.name = "tail_bt", .counts = tails, .n = 264, .k = 320, .block_n = bn});
        run({.name = "tail_bn", .counts = tails, .n = 264, .k = 320, .block_n = bn, .b_transposed = false});
    }
    run({.name = "tail_gather", .counts = tails, .n = 392, .k = 256, .gather = true});
    run({.name = "tail_pairs", .counts = tails, .n = 264, .k = 512, .b_transposed = false, .k_split = 256});
    run({.name = "tail_c32", .counts = tails, .n = 264, .k = 320, .c_dtype = MOEJIT_DTYPE_FP32});
    run({.name = "tail_acc", .counts = tails, .n = 264, .k = 320, .accumulate = true});
    run({.name = "tail_n72", .counts = tails, .n = 72, .k = 128, .block_n = 128});
}
