// Float64 CPU reference of the whole MoE layer, forward and backward (docs/DESIGN.md §2), for the
// layer's regression tests. Header-only, multi-threaded with std::thread.
//
// What it models. Every sum and product is computed in float64 from the exact values of the
// device inputs (bf16/fp16 values, held as float: products of two floats are exact in double).
// Where the device *stores* a tensor in the layer dtype (g, u, aw, y, out, daw, dg, du, dxs, dx)
// the reference rounds its float64 value to that dtype too, so the device is compared with the
// exact result of its own storage precision: the remaining differences are single-ulp flips
// where fp32 and float64 accumulation round to different neighbours. This matters for the
// SwiGLU limit: the gradient masks [g <= L], [-L <= u <= L] are decided on the stored g, u, and
// one bf16 ulp at 7 is 1/32, so an unrounded reference would disagree on every g within 1/64
// of L. Split fc1's dxs is rounded twice (dg·W_gate is stored, then du·W_up added to it), as the
// device accumulates it in the layer dtype; merged fc1 does one sum over 2I.
// The gathers (out, dx) sum in j order in float64 (the device: fp32 in j order).
// Weight gradients are float64 sums stored as float, not rounded to the gradient dtype (the
// caller does, or adds a prefill for accumulation); d_routing_weights is rounded to the routing
// dtype from the fp32 value of Σ_i a·daw, like the device's gather_weights.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace moejit::test {

// ---------------------------------------------------------------- storage rounding

enum class Storage { bf16, fp16, fp32 };

inline float round_to_bf16(float f) {
    if (std::isnan(f)) return f;
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest even (overflow gives inf, as on device)
    u &= 0xFFFF0000u;
    float r;
    std::memcpy(&r, &u, 4);
    return r;
}
inline float round_to_fp16(float f) { return static_cast<float>(static_cast<_Float16>(f)); }

// v as the device stores it in `s` (through fp32, as device code rounds its fp32 values).
inline float store_as(double v, Storage s) {
    const float f = static_cast<float>(v);
    switch (s) {
    case Storage::bf16: return round_to_bf16(f);
    case Storage::fp16: return round_to_fp16(f);
    case Storage::fp32: return f;
    }
    return f;
}

// ---------------------------------------------------------------- threads

inline unsigned ref_threads(unsigned requested = 0) {
    if (requested) return requested;
    const unsigned n = std::thread::hardware_concurrency();
    return n ? n : 4;
}

// Runs task(i) for every i in [0, n) on `threads` threads, dynamically scheduled (experts have
// uneven row counts). The first exception thrown by a task is rethrown here.
template <class F> void parallel_tasks(std::size_t n, unsigned threads, F &&task) {
    if (n == 0) return;
    const std::size_t workers = std::min<std::size_t>(ref_threads(threads), n);
    std::atomic<std::size_t> next{0};
    std::exception_ptr error;
    std::mutex error_mutex;
    auto worker = [&] {
        for (;;) {
            const std::size_t i = next.fetch_add(1);
            if (i >= n) return;
            try {
                task(i);
            } catch (...) {
                std::lock_guard lock(error_mutex);
                if (!error) error = std::current_exception();
                next.store(n);
            }
        }
    };
    std::vector<std::thread> pool;
    pool.reserve(workers - 1);
    for (std::size_t t = 1; t < workers; ++t) pool.emplace_back(worker);
    worker();
    for (std::thread &t : pool) t.join();
    if (error) std::rethrow_exception(error);
}

// ---------------------------------------------------------------- float64 GEMM kernels

namespace ref_detail {

typedef double d2 __attribute__((vector_size(16)));
typedef float f2 __attribute__((vector_size(8)));

inline d2 load_d2(const float *p) {
    f2 v;
    std::memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, d2);
}

// C[m][n] = Σ_k A[m][k]·B[n][k] for an MR x NR block; K even. Independent vector accumulators
// (the compiler will not reassociate a float64 reduction on its own).
template <int MR, int NR>
inline void nt_micro(double *c, std::int64_t ldc, const float *a, std::int64_t lda, const float *b,
                     std::int64_t ldb, std::int64_t K) {
    d2 acc[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] = d2{0.0, 0.0};
    for (std::int64_t k = 0; k < K; k += 2) {
        d2 av[MR], bv[NR];
        for (int i = 0; i < MR; ++i) av[i] = load_d2(a + i * lda + k);
        for (int j = 0; j < NR; ++j) bv[j] = load_d2(b + j * ldb + k);
        for (int i = 0; i < MR; ++i)
            for (int j = 0; j < NR; ++j) acc[i][j] += av[i] * bv[j];
    }
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) c[i * ldc + j] = acc[i][j][0] + acc[i][j][1];
}

template <int MR>
inline void nt_row_block(double *c, std::int64_t ldc, const float *a, std::int64_t lda,
                         const float *b, std::int64_t ldb, std::int64_t n0, std::int64_t n1,
                         std::int64_t K) {
    std::int64_t n = n0;
    for (; n + 4 <= n1; n += 4) nt_micro<MR, 4>(c + n, ldc, a, lda, b + n * ldb, ldb, K);
    for (; n < n1; ++n) nt_micro<MR, 1>(c + n, ldc, a, lda, b + n * ldb, ldb, K);
}

}  // namespace ref_detail

// C[m][n] = Σ_k A[m][k]·B[n][k] (the "x · Wᵀ" form), A [M,K] row stride lda, B [N,K] row
// stride ldb, C [M,N] row stride ldc, in float64. K must be even.
inline void ref_gemm_nt(double *c, std::int64_t ldc, const float *a, std::int64_t lda,
                        const float *b, std::int64_t ldb, std::int64_t M, std::int64_t N,
                        std::int64_t K) {
    if (K % 2 != 0) throw std::invalid_argument("ref_gemm_nt: K must be even");
    // Column blocks of B small enough to stay in L2 while every row pair of A passes over them.
    const std::int64_t nb = std::max<std::int64_t>(4, (std::int64_t{64} * 1024) / std::max<std::int64_t>(K, 1) / 4 * 4);
    for (std::int64_t n0 = 0; n0 < N; n0 += nb) {
        const std::int64_t n1 = std::min(N, n0 + nb);
        std::int64_t m = 0;
        for (; m + 2 <= M; m += 2)
            ref_detail::nt_row_block<2>(c + m * ldc, ldc, a + m * lda, lda, b, ldb, n0, n1, K);
        for (; m < M; ++m)
            ref_detail::nt_row_block<1>(c + m * ldc, ldc, a + m * lda, lda, b, ldb, n0, n1, K);
    }
}

// C[m][n] += Σ_k A(m,k)·B[k][n] with A(m,k) = a[m·a_m + k·a_k] (so both A·B and Aᵀ·B), B [K,N]
// row stride ldb, C [M,N] row stride ldc, in float64. Rows of C four at a time against one row
// of B: the inner loop has no reduction, so it vectorises.
inline void ref_gemm_axpy(double *c, std::int64_t ldc, const float *a, std::int64_t a_m,
                          std::int64_t a_k, const float *b, std::int64_t ldb, std::int64_t M,
                          std::int64_t N, std::int64_t K) {
    std::int64_t m = 0;
    for (; m + 4 <= M; m += 4) {
        double *__restrict c0 = c + (m + 0) * ldc;
        double *__restrict c1 = c + (m + 1) * ldc;
        double *__restrict c2 = c + (m + 2) * ldc;
        double *__restrict c3 = c + (m + 3) * ldc;
        for (std::int64_t k = 0; k < K; ++k) {
            const float *__restrict bk = b + k * ldb;
            const double a0 = a[(m + 0) * a_m + k * a_k], a1 = a[(m + 1) * a_m + k * a_k];
            const double a2 = a[(m + 2) * a_m + k * a_k], a3 = a[(m + 3) * a_m + k * a_k];
            if (a0 == 0.0 && a1 == 0.0 && a2 == 0.0 && a3 == 0.0) continue;  // masked rows
            for (std::int64_t n = 0; n < N; ++n) {
                const double bv = bk[n];
                c0[n] += a0 * bv;
                c1[n] += a1 * bv;
                c2[n] += a2 * bv;
                c3[n] += a3 * bv;
            }
        }
    }
    for (; m < M; ++m) {
        double *__restrict c0 = c + m * ldc;
        for (std::int64_t k = 0; k < K; ++k) {
            const double a0 = a[m * a_m + k * a_k];
            if (a0 == 0.0) continue;
            const float *__restrict bk = b + k * ldb;
            for (std::int64_t n = 0; n < N; ++n) c0[n] += a0 * static_cast<double>(bk[n]);
        }
    }
}

// ---------------------------------------------------------------- the layer

inline double ref_moe_sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// h(g', u') of the activation, and ∂h/∂g', ∂h/∂u' (g', u' already limited).
struct ActivationValue {
    double h, dh_dg, dh_du;
};
inline ActivationValue ref_activation(int activation, double alpha, double gc, double uc) {
    if (activation == 0) {
        const double sg = ref_moe_sigmoid(gc), silu = gc * sg;
        return {silu * uc, uc * sg * (1.0 + gc * (1.0 - sg)), silu};
    }
    const double sg = ref_moe_sigmoid(alpha * gc), glu = gc * sg;
    return {(uc + 1.0) * glu, (uc + 1.0) * sg * (1.0 + alpha * gc * (1.0 - sg)), glu};
}

struct MoeRefConfig {
    std::int64_t tokens = 0;        // T
    std::int64_t hidden = 0;        // H (even)
    std::int64_t intermediate = 0;  // I (even)
    std::int32_t experts = 0;       // E
    std::int32_t top_k = 0;         // k
    double limit = 0.0;             // <= 0: no SwiGLU limit
    int activation = 0;             // 0: SwiGLU silu(g')·u'; 1: gpt-oss (u'+1)·g'·σ(α·g')
    double alpha = 1.702;           // gpt-oss's α
    bool bias = false;              // b_gate, b_up added to g, u; b_down to fc2's output
    Storage dtype = Storage::bf16;  // the layer dtype: every stored activation and gradient
    Storage routing = Storage::fp32;  // d_routing_weights
    unsigned threads = 0;           // 0: all hardware threads
};

// Device input values, exactly (bf16/fp16 values are exact in float).
struct MoeRefInputs {
    std::span<const float> x;                // [T,H]
    std::span<const std::int64_t> selected;  // [T,k], values in [0,E)
    std::span<const float> routing_weights;  // [T,k]
    std::span<const float> w_gate;           // [E,I,H]
    std::span<const float> w_up;             // [E,I,H]
    std::span<const float> w_down;           // [E,H,I]
    std::span<const float> dout;             // [T,H]
    std::span<const float> b_gate = {}, b_up = {};  // [E,I] when cfg.bias
    std::span<const float> b_down = {};             // [E,H] when cfg.bias
};

struct MoeRefResult {
    // routing index
    std::vector<std::int32_t> counts;         // [E]
    std::vector<std::int32_t> offsets;        // [E+1]
    std::vector<std::int32_t> scatter_index;  // [T,k]
    std::vector<std::int64_t> route_of_row;   // [S]: t·k + j of scattered row s
    // forward, in scattered order where [S,·] (as stored by the device)
    std::vector<float> w_s;   // [S] routing weight per row
    std::vector<float> g, u;  // [S,I] fc1 outputs (split layout)
    std::vector<float> aw;    // [S,I] silu(g')·u'·w_s
    std::vector<float> y;     // [S,H] fc2 output
    std::vector<float> out;   // [T,H]
    // backward
    std::vector<float> daw;               // [S,I]
    std::vector<float> d_w_s;             // [S] Σ_i a·daw (fp32, as the device keeps it)
    std::vector<float> dg, du;            // [S,I]
    std::vector<float> dxs_split, dxs_merged;  // [S,H]
    std::vector<float> dx_split, dx_merged;    // [T,H]
    std::vector<float> d_routing_weights;      // [T,k], rounded to config.routing
    std::vector<float> dw_gate, dw_up;         // [E,I,H] float64 sums (not rounded to a dtype)
    std::vector<float> dw_down;                // [E,H,I]
    std::vector<float> db_gate, db_up;         // [E,I] float64 sums (cfg.bias)
    std::vector<float> db_down;                // [E,H] Σ w_s·dy (cfg.bias)
    // for the case log: how much of the SwiGLU limit is exercised
    double gate_clamped = 0;  // fraction of g > L
    double up_clamped = 0;    // fraction of |u| > L
};

namespace ref_detail {

// Work items: row blocks of one expert (every scattered row belongs to exactly one).
struct RowBlock {
    std::int32_t expert;
    std::int64_t begin, end;  // scattered rows
};
inline std::vector<RowBlock> row_blocks(const std::vector<std::int32_t> &offsets,
                                        std::int64_t rows_per_block) {
    std::vector<RowBlock> blocks;
    for (std::size_t e = 0; e + 1 < offsets.size(); ++e)
        for (std::int64_t r = offsets[e]; r < offsets[e + 1]; r += rows_per_block)
            blocks.push_back({static_cast<std::int32_t>(e), r,
                              std::min<std::int64_t>(r + rows_per_block, offsets[e + 1])});
    return blocks;
}

}  // namespace ref_detail

inline MoeRefResult moe_reference(const MoeRefConfig &cfg, const MoeRefInputs &in) {
    using std::size_t;
    const std::int64_t T = cfg.tokens, H = cfg.hidden, I = cfg.intermediate, K = cfg.top_k;
    const std::int32_t E = cfg.experts;
    const std::int64_t S = T * K;
    const unsigned threads = ref_threads(cfg.threads);
    auto require = [](bool ok, const char *what) {
        if (!ok) throw std::invalid_argument(std::string("moe_reference: ") + what);
    };
    require(T >= 0 && H > 0 && I > 0 && E > 0 && K > 0 && H % 2 == 0 && I % 2 == 0, "bad shape");
    require(in.x.size() == size_t(T * H) && in.dout.size() == size_t(T * H), "x/dout size");
    require(in.selected.size() == size_t(S) && in.routing_weights.size() == size_t(S), "routing size");
    require(in.w_gate.size() == size_t(E) * I * H && in.w_up.size() == size_t(E) * I * H, "w_gate/w_up size");
    require(in.w_down.size() == size_t(E) * H * I, "w_down size");
    const double L = cfg.limit;
    const bool has_limit = L > 0;
    if (cfg.bias)
        require(in.b_gate.size() == size_t(E) * I && in.b_up.size() == size_t(E) * I &&
                    in.b_down.size() == size_t(E) * H,
                "bias sizes");

    MoeRefResult r;
    // ---- routing index: a stable counting sort of the routes (t,j) by expert, row-major
    r.counts.assign(E, 0);
    for (std::int64_t p = 0; p < S; ++p) {
        const std::int64_t e = in.selected[p];
        require(e >= 0 && e < E, "selected expert out of range");
        ++r.counts[e];
    }
    r.offsets.assign(E + 1, 0);
    for (std::int32_t e = 0; e < E; ++e) r.offsets[e + 1] = r.offsets[e] + r.counts[e];
    r.scatter_index.resize(S);
    r.route_of_row.resize(S);
    {
        std::vector<std::int32_t> next(r.offsets.begin(), r.offsets.end() - 1);
        for (std::int64_t p = 0; p < S; ++p) {
            const std::int32_t s = next[in.selected[p]]++;
            r.scatter_index[p] = s;
            r.route_of_row[s] = p;
        }
    }

    const size_t SH = size_t(S * H), SI = size_t(S * I);
    r.w_s.resize(S);
    std::vector<float> xs(SH), dy(SH);
    for (std::int64_t s = 0; s < S; ++s) {
        const std::int64_t p = r.route_of_row[s], t = p / K;
        r.w_s[s] = in.routing_weights[p];
        std::memcpy(&xs[s * H], &in.x[t * H], H * sizeof(float));
        std::memcpy(&dy[s * H], &in.dout[t * H], H * sizeof(float));
    }

    // Rows of one work item: a few dozen, so B (an expert's weight) is reused from cache.
    const auto blocks = ref_detail::row_blocks(r.offsets, 32);
    r.g.resize(SI);
    r.u.resize(SI);
    r.aw.resize(SI);
    r.y.resize(SH);
    r.daw.resize(SI);
    r.dg.resize(SI);
    r.du.resize(SI);
    r.d_w_s.resize(S);
    r.dxs_split.resize(SH);
    r.dxs_merged.resize(SH);
    std::atomic<std::int64_t> gate_clamped{0}, up_clamped{0};

    parallel_tasks(blocks.size(), threads, [&](size_t b) {
        const ref_detail::RowBlock blk = blocks[b];
        const std::int64_t R = blk.end - blk.begin, s0 = blk.begin;
        const size_t e = size_t(blk.expert);
        const float *wg = &in.w_gate[e * I * H], *wu = &in.w_up[e * I * H];
        const float *wd = &in.w_down[e * H * I];
        std::vector<double> acc_i(size_t(R * I)), acc_i2(size_t(R * I)), acc_h(size_t(R * H)),
            acc_h2(size_t(R * H));
        std::int64_t n_gate = 0, n_up = 0;

        // ---- forward
        // g = xs·W_gateᵀ, u = xs·W_upᵀ (stored in the layer dtype)
        ref_gemm_nt(acc_i.data(), I, &xs[s0 * H], H, wg, H, R, I, H);
        ref_gemm_nt(acc_i2.data(), I, &xs[s0 * H], H, wu, H, R, I, H);
        for (std::int64_t q = 0; q < R * I; ++q) {
            r.g[s0 * I + q] = store_as(acc_i[q], cfg.dtype);
            r.u[s0 * I + q] = store_as(acc_i2[q], cfg.dtype);
            if (cfg.bias) {  // the stored GEMM output plus the bias, stored again (as the device)
                const size_t c = size_t(q % I);
                r.g[s0 * I + q] = store_as(double(r.g[s0 * I + q]) + in.b_gate[e * I + c], cfg.dtype);
                r.u[s0 * I + q] = store_as(double(r.u[s0 * I + q]) + in.b_up[e * I + c], cfg.dtype);
            }
        }
        // aw = h(g', u')·w_s, from the stored g, u
        for (std::int64_t i = 0; i < R; ++i) {
            const double w = r.w_s[s0 + i];
            for (std::int64_t c = 0; c < I; ++c) {
                const size_t q = size_t((s0 + i) * I + c);
                double g = r.g[q], u = r.u[q];
                if (has_limit) {
                    n_gate += g > L;
                    n_up += (u > L || u < -L);
                    g = std::min(g, L);
                    u = std::clamp(u, -L, L);
                }
                r.aw[q] = store_as(ref_activation(cfg.activation, cfg.alpha, g, u).h * w, cfg.dtype);
            }
        }
        // y = aw·W_downᵀ
        ref_gemm_nt(acc_h.data(), H, &r.aw[s0 * I], I, wd, I, R, H, I);
        for (std::int64_t q = 0; q < R * H; ++q) r.y[s0 * H + q] = store_as(acc_h[q], cfg.dtype);

        // ---- backward (rows part)
        // daw = dy·W_down (W_down [H,I] is the [K,N] operand)
        std::fill(acc_i.begin(), acc_i.end(), 0.0);
        ref_gemm_axpy(acc_i.data(), I, &dy[s0 * H], H, 1, wd, I, R, I, H);
        for (std::int64_t q = 0; q < R * I; ++q) r.daw[s0 * I + q] = store_as(acc_i[q], cfg.dtype);
        // SwiGLU backward; d_w_s = Σ_i a·daw with a recomputed in float64 from the stored g, u
        for (std::int64_t i = 0; i < R; ++i) {
            const double w = r.w_s[s0 + i];
            double dws = 0;
            for (std::int64_t c = 0; c < I; ++c) {
                const size_t q = size_t((s0 + i) * I + c);
                const double g = r.g[q], u = r.u[q], d = r.daw[q];
                const double gc = has_limit ? std::min(g, L) : g;
                const double uc = has_limit ? std::clamp(u, -L, L) : u;
                const ActivationValue av = ref_activation(cfg.activation, cfg.alpha, gc, uc);
                const double da = d * w;
                const bool pass_u = !has_limit || (-L <= u && u <= L);
                const bool pass_g = !has_limit || g <= L;
                r.du[q] = store_as(pass_u ? da * av.dh_du : 0.0, cfg.dtype);
                r.dg[q] = store_as(pass_g ? da * av.dh_dg : 0.0, cfg.dtype);
                dws += av.h * d;
            }
            if (cfg.bias)  // out = Σ_j w·(y + b_down[e]): ∂/∂w adds dy·b_down[e]
                for (std::int64_t h = 0; h < H; ++h) dws += double(dy[(s0 + i) * H + h]) * in.b_down[e * H + h];
            r.d_w_s[s0 + i] = static_cast<float>(dws);
        }
        // dxs = dg·W_gate + du·W_up (W_gate [I,H] is the [K,N] operand)
        std::fill(acc_h.begin(), acc_h.end(), 0.0);
        std::fill(acc_h2.begin(), acc_h2.end(), 0.0);
        ref_gemm_axpy(acc_h.data(), H, &r.dg[s0 * I], I, 1, wg, H, R, H, I);
        ref_gemm_axpy(acc_h2.data(), H, &r.du[s0 * I], I, 1, wu, H, R, H, I);
        for (std::int64_t q = 0; q < R * H; ++q) {
            const size_t o = size_t(s0 * H + q);
            r.dxs_merged[o] = store_as(acc_h[q] + acc_h2[q], cfg.dtype);
            r.dxs_split[o] = store_as(double(store_as(acc_h[q], cfg.dtype)) + acc_h2[q], cfg.dtype);
        }
        gate_clamped += n_gate;
        up_clamped += n_up;
    });
    if (S > 0 && has_limit) {
        r.gate_clamped = double(gate_clamped.load()) / double(SI);
        r.up_clamped = double(up_clamped.load()) / double(SI);
    }

    // ---- gathers: out, dx (float64 sums in j order), d_routing_weights
    r.out.resize(size_t(T * H));
    r.dx_split.resize(size_t(T * H));
    r.dx_merged.resize(size_t(T * H));
    const std::int64_t token_block = 64;
    parallel_tasks(size_t((T + token_block - 1) / token_block), threads, [&](size_t b) {
        const std::int64_t t0 = std::int64_t(b) * token_block, t1 = std::min(T, t0 + token_block);
        for (std::int64_t t = t0; t < t1; ++t)
            for (std::int64_t h = 0; h < H; ++h) {
                double o = 0, ds = 0, dm = 0;
                for (std::int64_t j = 0; j < K; ++j) {
                    const size_t s = size_t(r.scatter_index[t * K + j]);
                    o += r.y[s * H + h];
                    if (cfg.bias) o += double(r.w_s[s]) * in.b_down[size_t(in.selected[t * K + j]) * H + h];
                    ds += r.dxs_split[s * H + h];
                    dm += r.dxs_merged[s * H + h];
                }
                r.out[t * H + h] = store_as(o, cfg.dtype);
                r.dx_split[t * H + h] = store_as(ds, cfg.dtype);
                r.dx_merged[t * H + h] = store_as(dm, cfg.dtype);
            }
    });
    r.d_routing_weights.resize(size_t(S));
    for (std::int64_t p = 0; p < S; ++p)
        r.d_routing_weights[p] = store_as(r.d_w_s[r.scatter_index[p]], cfg.routing);

    // ---- weight gradients: reductions over each expert's rows (empty experts: exactly 0)
    r.dw_gate.assign(size_t(E) * I * H, 0.0f);
    r.dw_up.assign(size_t(E) * I * H, 0.0f);
    r.dw_down.assign(size_t(E) * H * I, 0.0f);
    struct WgradTask {
        int which;  // 0: dW_gate, 1: dW_up, 2: dW_down
        std::int32_t expert;
        std::int64_t m0, m1;  // output rows
    };
    std::vector<WgradTask> tasks;
    const std::int64_t m_block = 32;
    for (std::int32_t e = 0; e < E; ++e) {
        if (r.counts[e] == 0) continue;
        for (int which = 0; which < 3; ++which) {
            const std::int64_t M = which == 2 ? H : I;
            for (std::int64_t m = 0; m < M; m += m_block) tasks.push_back({which, e, m, std::min(M, m + m_block)});
        }
    }
    parallel_tasks(tasks.size(), threads, [&](size_t ti) {
        const WgradTask tk = tasks[ti];
        const std::int64_t s0 = r.offsets[tk.expert], R = r.counts[tk.expert];
        const std::int64_t Mb = tk.m1 - tk.m0;
        // dW_gate[e][i,:] = Σ_r dg[r,i]·xs[r,:];  dW_down[e][h,:] = Σ_r dy[r,h]·aw[r,:]
        const float *a = tk.which == 0 ? &r.dg[s0 * I] : tk.which == 1 ? &r.du[s0 * I] : &dy[s0 * H];
        const std::int64_t a_rows = tk.which == 2 ? H : I;  // row stride of the A operand
        const float *b = tk.which == 2 ? &r.aw[s0 * I] : &xs[s0 * H];
        const std::int64_t N = tk.which == 2 ? I : H;
        std::vector<double> acc(size_t(Mb * N), 0.0);
        ref_gemm_axpy(acc.data(), N, a + tk.m0, 1, a_rows, b, N, Mb, N, R);
        float *dst = (tk.which == 0 ? r.dw_gate.data() : tk.which == 1 ? r.dw_up.data() : r.dw_down.data()) +
                     (size_t(tk.expert) * (tk.which == 2 ? H : I) + tk.m0) * N;
        for (std::int64_t q = 0; q < Mb * N; ++q) dst[q] = static_cast<float>(acc[q]);
    });

    // ---- bias gradients: per-expert sums over its rows (empty experts: exactly 0)
    if (cfg.bias) {
        r.db_gate.assign(size_t(E) * I, 0.0f);
        r.db_up.assign(size_t(E) * I, 0.0f);
        r.db_down.assign(size_t(E) * H, 0.0f);
        parallel_tasks(size_t(E), threads, [&](size_t e) {
            std::vector<double> bg(size_t(I), 0.0), bu(size_t(I), 0.0), bd(size_t(H), 0.0);
            for (std::int64_t s = r.offsets[e]; s < r.offsets[e + 1]; ++s) {
                for (std::int64_t c = 0; c < I; ++c) {
                    bg[c] += r.dg[s * I + c];
                    bu[c] += r.du[s * I + c];
                }
                for (std::int64_t h = 0; h < H; ++h) bd[h] += double(r.w_s[s]) * dy[s * H + h];
            }
            for (std::int64_t c = 0; c < I; ++c) {
                r.db_gate[e * I + c] = static_cast<float>(bg[c]);
                r.db_up[e * I + c] = static_cast<float>(bu[c]);
            }
            for (std::int64_t h = 0; h < H; ++h) r.db_down[e * H + h] = static_cast<float>(bd[h]);
        });
    }
    return r;
}

}  // namespace moejit::test
