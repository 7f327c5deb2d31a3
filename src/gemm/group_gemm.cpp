#include "gemm/group_gemm.hpp"

#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "gemm/tile_schedule.hpp"
#include "gemm/gemm_common.hpp"
#include "gemm/gemm_tuner.hpp"
#include "gemm/group_gemm_sm90.hpp"

namespace moejit {
namespace {

// Sizes are template constants and 32-bit ints on the device; 2^20 columns is far beyond any
// MoE layer and keeps every in-tile index product well inside int32.
constexpr std::int64_t kMaxDim = std::int64_t{1} << 20;
constexpr std::int32_t kMaxExperts = 65536;

void check_dtypes(DType dtype, DType c_dtype, const char *prefix) {
    MOEJIT_REQUIRE(is_half_precision(dtype),
                   "{}dtype must be MOEJIT_DTYPE_BF16 or MOEJIT_DTYPE_FP16, got {} ({})", prefix,
                   static_cast<int>(dtype), dtype_name(dtype));
    MOEJIT_REQUIRE(c_dtype == dtype || c_dtype == DType::fp32,
                   "{}c_dtype must be the operand dtype ({}) or MOEJIT_DTYPE_FP32, got {} ({})",
                   prefix, dtype_name(dtype), static_cast<int>(c_dtype), dtype_name(c_dtype));
}

void check_dim(std::int64_t v, const char *prefix, const char *name) {
    MOEJIT_REQUIRE(v > 0 && v % 8 == 0,
                   "{}{} must be a positive multiple of 8 (16-byte rows), got {}", prefix, name,
                   v);
    if (v > kMaxDim)
        fail(Status::unsupported, "{}{} = {} exceeds the supported maximum of {}", prefix,
             name, v, kMaxDim);
}

void check_experts(std::int32_t e, const char *prefix) {
    MOEJIT_REQUIRE(e >= 1, "{}num_experts must be >= 1, got {}", prefix, e);
    if (e > kMaxExperts)
        fail(Status::unsupported, "{}num_experts = {} exceeds the supported maximum of {}",
             prefix, e, kMaxExperts);
}

GemmProblem problem_of(const GemmNkSpec &s, std::int64_t rows_hint, std::int32_t experts) {
    return {.kind = GemmKind::same_nk, .dtype = s.dtype, .c_dtype = s.c_dtype, .n = s.n, .k = s.k,
            .b_transposed = s.b_transposed, .accumulate = s.accumulate, .rows_hint = rows_hint,
            .num_experts = experts, .gather_a = s.gather_a, .k_split = s.k_split, .swiglu = s.swiglu.on};
}

GemmProblem problem_of(const GemmMnSpec &s, std::int64_t rows_hint, std::int32_t experts) {
    return {.kind = GemmKind::same_mn, .dtype = s.dtype, .c_dtype = s.c_dtype, .m = s.m, .n = s.n,
            .accumulate = s.accumulate, .rows_hint = rows_hint, .num_experts = experts};
}

void validate_shape(const GemmNkSpec &s, const char *prefix) {
    check_dtypes(s.dtype, s.c_dtype, prefix);
    check_dim(s.n, prefix, "n");
    check_dim(s.k, prefix, "k");
    MOEJIT_REQUIRE(s.k_split == 0 || (s.k_split > 0 && s.k_split < s.k && s.k_split % 64 == 0),
                   "{}k_split is {}, expected 0 or a multiple of 64 in (0, k = {})", prefix, s.k_split, s.k);
    MOEJIT_REQUIRE(s.k_split == 0 || !s.gather_a, "{}k_split ({}) and gather_a exclude each other", prefix,
                   s.k_split);
    if (s.swiglu.on) {
        MOEJIT_REQUIRE(s.b_transposed && !s.accumulate && s.c_dtype == s.dtype && s.k_split == 0,
                       "{}the SwiGLU epilogue needs b_transposed, no accumulate, c_dtype = dtype and no k_split",
                       prefix);
        MOEJIT_REQUIRE(s.n % 16 == 0, "{}n is {}: the SwiGLU epilogue's n = 2I needs I a multiple of 8", prefix,
                       s.n);
    }
}

void validate_shape(const GemmMnSpec &s, const char *prefix) {
    check_dtypes(s.dtype, s.c_dtype, prefix);
    check_dim(s.m, prefix, "m");
    check_dim(s.n, prefix, "n");
    MOEJIT_REQUIRE(!s.accumulate || s.c_dtype == DType::fp32,
                   "{}accumulate = 1 requires c_dtype MOEJIT_DTYPE_FP32 (got {}): weight "
                   "gradients accumulate across micro-batches in fp32 only",
                   prefix, dtype_name(s.c_dtype));
}

std::string config_type(const GemmTileConfig &t, DType dtype, DType c_dtype) {
    return fmt::format("moejit::gg::Config<{}, {}, {}, {}, {}, {}, {}, {}, {}>",
                       dtype_cuda_type(dtype), dtype_cuda_type(c_dtype), t.block_m, t.block_n,
                       t.block_k, t.stages, t.warps_m, t.warps_n, t.group_m);
}


void check_operands(const GemmOperands &ops, std::size_t c_elem, bool need_ab, bool need_c,
                    const char *prefix) {
    MOEJIT_REQUIRE(ops.rows >= 0 && ops.rows <= INT32_MAX,
                   "{}rows must be in [0, 2147483647] (offsets are int32), got {}", prefix,
                   ops.rows);
    check_experts(ops.num_experts, prefix);
    if (need_ab) {
        MOEJIT_REQUIRE(ops.a != nullptr, "{}a is NULL (rows = {})", prefix, ops.rows);
        MOEJIT_REQUIRE(ops.b != nullptr, "{}b is NULL (rows = {})", prefix, ops.rows);
        MOEJIT_REQUIRE(aligned(ops.a, 16), "{}a must be 16-byte aligned", prefix);
        MOEJIT_REQUIRE(aligned(ops.b, 16), "{}b must be 16-byte aligned", prefix);
    }
    if (need_c) {
        MOEJIT_REQUIRE(ops.c != nullptr, "{}c is NULL", prefix);
        MOEJIT_REQUIRE(aligned(ops.c, 2 * c_elem), "{}c must be {}-byte aligned", prefix,
                       2 * c_elem);
        MOEJIT_REQUIRE(ops.offsets != nullptr, "{}offsets is NULL", prefix);
        MOEJIT_REQUIRE(aligned(ops.offsets, 4), "{}offsets must be 4-byte aligned", prefix);
    }
}

// The operands a same_nk spec's features add (rows > 0): gathered rows, the second operand
// pair, the SwiGLU epilogue's outputs. A same_mn spec adds none.
void check_spec_operands(const GemmNkSpec &spec, const GemmOperands &ops, const char *prefix) {
    if (ops.rows <= 0) return;
    if (spec.gather_a) {
        MOEJIT_REQUIRE(ops.row_token != nullptr, "{}row_token is NULL: the spec gathers a's rows", prefix);
        MOEJIT_REQUIRE(aligned(ops.row_token, 4), "{}row_token must be 4-byte aligned", prefix);
    }
    if (spec.k_split > 0) {
        MOEJIT_REQUIRE(ops.a2 != nullptr && ops.b2 != nullptr,
                       "{}a2 or b2 is NULL: the spec splits K over two operand pairs", prefix);
        MOEJIT_REQUIRE(aligned(ops.a2, 16) && aligned(ops.b2, 16), "{}a2 and b2 must be 16-byte aligned", prefix);
    }
    if (spec.swiglu.on) {
        const std::size_t c_elem = dtype_size(spec.c_dtype);
        MOEJIT_REQUIRE(spec.swiglu.merged || (ops.b2 != nullptr && aligned(ops.b2, 16)),
                       "{}b2 (W_up) is NULL or not 16-byte aligned: the SwiGLU epilogue's split layout", prefix);
        MOEJIT_REQUIRE(ops.glu.up != nullptr && ops.glu.aw != nullptr && ops.glu.w_s != nullptr,
                       "{}glu.up, glu.aw and glu.w_s must be given for the SwiGLU epilogue", prefix);
        MOEJIT_REQUIRE(aligned(ops.glu.up, 2 * c_elem) && aligned(ops.glu.aw, 2 * c_elem) && aligned(ops.glu.w_s, 4),
                       "{}glu.up and glu.aw must be {}-byte aligned, glu.w_s 4-byte", prefix, 2 * c_elem);
        MOEJIT_REQUIRE(!spec.swiglu.limit || ops.glu.limit > 0.0f, "{}glu.limit is {}, expected > 0", prefix,
                       ops.glu.limit);
    }
}
void check_spec_operands(const GemmMnSpec &, const GemmOperands &, const char *) {}

void launch_spec(Context &ctx, const GemmNkSpec &spec, const GemmOperands &ops,
               const char *prefix, const char *what, const GemmKernels *bound) {
    validate_shape(spec, prefix);
    check_operands(ops, dtype_size(spec.c_dtype), ops.rows > 0, ops.rows > 0, prefix);
    check_spec_operands(spec, ops, prefix);
    const int cc = ctx.compute_capability();
    validate_tile_config(spec.tile, problem_of(spec, ops.rows, ops.num_experts), cc);
    const std::int64_t m_bound = m_tile_bound(ops.rows, ops.num_experts, spec.tile.block_m);
    const std::int64_t tiles =
        nk_tile_bound(ops.rows, ops.num_experts, spec.tile.block_m, spec.n, spec.tile.block_n);
    if (tiles > INT32_MAX)
        fail(Status::unsupported, "{}: {} tiles exceed the 32-bit tile index", what, tiles);
    ctx.require_device(what);
    if (ops.rows == 0) return;  // nothing to write: no launch, no compile
    if (spec.tile.engine == GemmEngine::wgmma)
        return launch_group_gemm_nk_sm90(ctx, spec, ops, tiles, m_bound, bound);
    const Kernel &kernel = bound ? *bound->main : ctx.kernel(render_group_gemm_nk(spec));
    const LaunchShape shape = gemm_launch_shape(ctx, spec.tile, GemmKind::same_nk, tiles, ops.num_experts);
    ctx.launch(kernel, shape, ops.stream,
               kargs::GemmNkArgs{ops.a, ops.b, ops.c, ops.offsets, static_cast<int>(ops.rows), ops.num_experts,
                               static_cast<int>(m_bound)});
}

void launch_spec(Context &ctx, const GemmMnSpec &spec, const GemmOperands &ops,
               const char *prefix, const char *what, const GemmKernels *bound) {
    validate_shape(spec, prefix);
    // Accumulating into C with no rows adds nothing; otherwise C = 0 must still be written.
    const bool nothing = ops.rows == 0 && spec.accumulate;
    check_operands(ops, dtype_size(spec.c_dtype), ops.rows > 0, !nothing, prefix);
    const int cc = ctx.compute_capability();
    validate_tile_config(spec.tile, problem_of(spec, ops.rows, ops.num_experts), cc);
    const std::int64_t tiles = mn_tile_count(ops.num_experts, spec.m, spec.tile.block_m, spec.n,
                                             spec.tile.block_n);
    if (tiles > INT32_MAX)
        fail(Status::unsupported, "{}: {} tiles exceed the 32-bit tile index", what, tiles);
    ctx.require_device(what);
    if (nothing) return;
    if (spec.tile.engine == GemmEngine::wgmma) return launch_group_gemm_mn_sm90(ctx, spec, ops, tiles, bound);
    const Kernel &kernel = bound ? *bound->main : ctx.kernel(render_group_gemm_mn(spec));
    const LaunchShape shape = gemm_launch_shape(ctx, spec.tile, GemmKind::same_mn, tiles, ops.num_experts);
    // With rows == 0 nothing is read: a and b may be null; pass c so addresses stay valid.
    const void *a = ops.a ? ops.a : ops.c, *b = ops.b ? ops.b : ops.c;
    ctx.launch(kernel, shape, ops.stream,
               kargs::GemmMnArgs{a, b, ops.c, ops.offsets, static_cast<int>(ops.rows), ops.num_experts});
}

// Tuning (the context's Config::tuning()): a tunable spec's tile becomes the problem's tuned
// winner (timed on these operands on first use, or read from the cache folder), then the launch
// proceeds as usual.
template <class Spec>
void launch_tuned(Context &ctx, const Spec &spec, const GemmOperands &ops, const char *prefix, const char *what,
                  const GemmKernels *bound = nullptr) {
    if (!spec.tunable || ops.rows <= 0 || ctx.compile_only() || !ctx.tuning())
        return launch_spec(ctx, spec, ops, prefix, what, bound);
    validate_shape(spec, prefix);
    check_operands(ops, dtype_size(spec.c_dtype), true, true, prefix);
    check_spec_operands(spec, ops, prefix);
    Spec tuned = spec;
    tuned.tile = tuned_tile(ctx, problem_of(spec, ops.rows, ops.num_experts), ops.rows, ops.stream, spec.tile,
                            !spec.accumulate, [&](const GemmTileConfig &t) {
                                Spec s = spec;
                                s.tile = t;
                                launch_spec(ctx, s, ops, prefix, what, nullptr);
                            });
    launch_spec(ctx, tuned, ops, prefix, what, nullptr);
}

// The C ABI ops: the args' operands, and the tile (given, or the heuristic's: then tunable).
template <class Args> GemmOperands operands_of(const Args &args) {
    return {.a = args.a, .b = args.b, .c = args.c, .offsets = args.offsets, .rows = args.rows,
            .num_experts = args.num_experts, .stream = args.stream};
}

template <class Spec, class Args>
void launch_from_args(Context &ctx, Spec &spec, const Args &args, const GemmTileConfig *tile, const char *what) {
    constexpr const char *prefix = "args->";
    MOEJIT_REQUIRE(args.accumulate == 0 || args.accumulate == 1,
                   "args->accumulate must be 0 or 1, got {}", args.accumulate);
    spec.accumulate = args.accumulate == 1;
    validate_shape(spec, prefix);
    check_experts(args.num_experts, prefix);
    const std::optional<ForcedTile> forced = forced_tile(ctx.config());
    spec.tile = tile ? *tile
                     : choose_tile_config(problem_of(spec, args.rows, args.num_experts), ctx.compute_capability(),
                                          forced ? &*forced : nullptr);
    spec.tunable = tile == nullptr;
    launch_tuned(ctx, spec, operands_of(args), prefix, what);
}

}  // namespace

GemmNkSpec make_nk_spec(DType dtype, DType c_dtype, std::int64_t n,
                        std::int64_t k, bool b_transposed, bool accumulate,
                        std::int64_t rows_hint, std::int32_t num_experts, int cc, const ForcedTile *forced) {
    const GemmNkSpec s{.dtype = dtype, .c_dtype = c_dtype, .n = n, .k = k, .b_transposed = b_transposed,
                       .accumulate = accumulate, .tile = {}};
    return with_chosen_tile(s, rows_hint, num_experts, cc, forced);
}

GemmNkSpec with_chosen_tile(GemmNkSpec s, std::int64_t rows_hint, std::int32_t num_experts, int cc,
                            const ForcedTile *forced) {
    s.tile = choose_tile_config(problem_of(s, rows_hint, num_experts), cc, forced);
    s.tunable = true;
    return s;
}

GemmMnSpec make_mn_spec(DType dtype, DType c_dtype, std::int64_t m,
                        std::int64_t n, bool accumulate, std::int64_t rows_hint,
                        std::int32_t num_experts, int cc, const ForcedTile *forced) {
    GemmMnSpec s{.dtype = dtype, .c_dtype = c_dtype, .m = m, .n = n, .accumulate = accumulate, .tile = {}};
    s.tile = choose_tile_config(problem_of(s, rows_hint, num_experts), cc, forced);
    s.tunable = true;
    return s;
}

namespace {

// Only where the ring buys a deeper operand ring (BN 256: at BN 128 and 64 the whole row block
// is no larger than the slots), and not tuned away: the tuner's candidates have no ring. Only
// with enough rows per expert (measured on an H100, docs/PERF_LOG.md ninth session): at 128 per
// expert deepseek-v3-4k's gathered fc1 (K = 7168) ran 1.4x slower with the ring and its fc2
// dgrad 1.08x, and weight gradients of 256 rows per expert (their K) 1.03-1.07x slower, while at
// 1024 every GEMM of qwen3-30b-a3b ran 1-5 % faster.
template <class Spec> Spec ring_of(Spec s, std::int64_t rows_hint, std::int32_t num_experts, int cc) {
    GemmTileConfig t = s.tile;
    if (t.engine != GemmEngine::wgmma || !t.tma_store || t.pingpong || t.store_ring) return s;
    constexpr bool weight_gradient = std::is_same_v<Spec, GemmMnSpec>;
    const std::int64_t rows_per_expert = num_experts > 0 ? rows_hint / num_experts : 0;
    // Where it lost (docs/PERF_LOG.md, the ninth and tenth sessions' entries): weight gradients
    // below 1024 rows per expert, other GEMMs below 256, and a gathered A over a long K (fc1 of
    // deepseek-v3, K = 7168) at 256 rows per expert, 1.22x slower.
    std::int64_t min_rows = weight_gradient ? 1024 : 256;
    if constexpr (!weight_gradient) {
        if (s.gather_a && s.k >= 4096) min_rows = 1024;
    }
    if (rows_per_expert < min_rows) return s;
    t.store_ring = true;
    const GemmProblem p = problem_of(s, 0, num_experts);
    t.stages = deepest_stages(t, p.kind, num_experts, cc, s.tile.stages + 1);
    if (t.stages == 0) return s;
    try {
        validate_tile_config(t, p, cc);
    } catch (const Error &) {
        return s;  // not runnable with the ring: the tile as it was
    }
    s.tile = t;
    s.tunable = false;
    return s;
}

}  // namespace

GemmNkSpec with_store_ring(GemmNkSpec s, std::int64_t rows_hint, std::int32_t num_experts, int cc) {
    return ring_of(s, rows_hint, num_experts, cc);
}
GemmMnSpec with_store_ring(GemmMnSpec s, std::int64_t rows_hint, std::int32_t num_experts, int cc) {
    return ring_of(s, rows_hint, num_experts, cc);
}

void validate_nk_spec(const GemmNkSpec &spec, std::int32_t num_experts, int cc) {
    validate_shape(spec, "");
    check_experts(num_experts, "");
    validate_tile_config(spec.tile, problem_of(spec, 0, num_experts), cc);
}

void validate_mn_spec(const GemmMnSpec &spec, std::int32_t num_experts, int cc) {
    validate_shape(spec, "");
    check_experts(num_experts, "");
    validate_tile_config(spec.tile, problem_of(spec, 0, num_experts), cc);
}

namespace {

// The mma.sync engine's unit: gg::Config, `min_blocks_per_sm` CTAs per SM.
GemmUnit mma_unit(const char *kind, std::string name, const GemmTileConfig &t, DType dtype,
                  DType c_dtype, std::string kind_args) {
    GemmUnit u = gemm_unit(kind, std::move(name), std::move(kind_args));
    u.template_name = "group_gemm.cuh";
    u.ns = "moejit::gg";
    u.cfg = config_type(t, dtype, c_dtype);
    u.bounds = fmt::format("{}, {}", t.threads(), t.min_blocks_per_sm);
    return u;
}

}  // namespace

KernelSource render_group_gemm_nk(const GemmNkSpec &s) {
    validate_shape(s, "");
    require_engine_features(s.tile, problem_of(s, 0, 1));
    if (s.tile.engine == GemmEngine::wgmma) return render_group_gemm_nk_sm90(s);
    return render_gemm_unit<kargs::GemmNkArgs>(
        mma_unit("nk", gemm_kernel_name(s), s.tile, s.dtype, s.c_dtype,
                 fmt::format("{}, {}, {}, {}", s.n, s.k, bool_text(s.b_transposed), bool_text(s.accumulate))));
}

KernelSource render_group_gemm_mn(const GemmMnSpec &s) {
    validate_shape(s, "");
    if (s.tile.engine == GemmEngine::wgmma) return render_group_gemm_mn_sm90(s);
    return render_gemm_unit<kargs::GemmMnArgs>(mma_unit("mn", gemm_kernel_name(s), s.tile, s.dtype, s.c_dtype,
                                                      fmt::format("{}, {}, {}", s.m, s.n, bool_text(s.accumulate))));
}

std::vector<KernelSource> group_gemm_kernels(const GemmNkSpec &spec) { return {render_group_gemm_nk(spec)}; }

std::vector<KernelSource> group_gemm_kernels(const GemmMnSpec &spec) {
    std::vector<KernelSource> out = {render_group_gemm_mn(spec)};
    if (spec.tile.engine == GemmEngine::wgmma && mn_can_split(spec.m, spec.n))
        out.push_back(render_split_reduce_sm90(spec));
    return out;
}

GemmKernels bind_gemm_kernels(const std::vector<Kernel *> &kernels) {
    return GemmKernels{kernels.at(0), kernels.size() > 1 ? kernels[1] : nullptr};
}

void launch_group_gemm_nk(Context &ctx, const GemmNkSpec &spec, const GemmOperands &ops, const GemmKernels *bound) {
    launch_tuned(ctx, spec, ops, "", "launch_group_gemm_nk", bound);
}

void launch_group_gemm_mn(Context &ctx, const GemmMnSpec &spec, const GemmOperands &ops, const GemmKernels *bound) {
    launch_tuned(ctx, spec, ops, "", "launch_group_gemm_mn", bound);
}

void group_gemm_same_nk(Context &ctx, const GroupGemmNkArgs &args,
                        const GemmTileConfig *tile) {
    MOEJIT_REQUIRE(args.b_transposed == 0 || args.b_transposed == 1,
                   "args->b_transposed must be 0 or 1, got {}", args.b_transposed);
    GemmNkSpec spec{.dtype = args.dtype, .c_dtype = args.c_dtype, .n = args.n, .k = args.k,
                    .b_transposed = args.b_transposed == 1, .tile = {}};
    launch_from_args(ctx, spec, args, tile, "moejit_group_gemm_same_nk");
}

void group_gemm_same_mn(Context &ctx, const GroupGemmMnArgs &args,
                        const GemmTileConfig *tile) {
    GemmMnSpec spec{.dtype = args.dtype, .c_dtype = args.c_dtype, .m = args.m, .n = args.n, .tile = {}};
    launch_from_args(ctx, spec, args, tile, "moejit_group_gemm_same_mn");
}

}  // namespace moejit
