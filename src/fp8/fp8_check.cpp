// The FP8 family's one validator: every refusal names the field and what is supported.
#include <cstdint>
#include <initializer_list>
#include <limits>

#include <fmt/format.h>

#include "fp8/fp8.hpp"
#include "gemm/tile_config.hpp"

namespace moejit {
namespace {

constexpr int kHopper = 90;
constexpr std::size_t kStaticSmemSlack = 256;  // the quantizers' and the scan's static shared memory
constexpr std::int64_t kMaxDim = std::numeric_limits<std::int32_t>::max();
constexpr std::int32_t kMaxQuantColsExperts = 4096;  // 16 KiB of cum[E+1] beside the 19.5 KiB tile

template <class... Args>
std::optional<Fp8Refusal> refuse(Status status, fmt::format_string<Args...> format, Args &&...args) {
    return Fp8Refusal{status, fmt::format(format, std::forward<Args>(args)...)};
}

bool aligned_to(const void *p, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// FP8 here is the sm_90a family: e4m3 wgmma and cvt.satfinite.e4m3x2 (sm_89+) in the GEMM, TMA.
std::optional<Fp8Refusal> check_arch(const std::string &arch, const char *what) {
    if (arch != "sm_90a")
        return refuse(Status::unsupported, "{}: the FP8 kernels need an sm_90a context (Hopper), got {}", what, arch);
    return std::nullopt;
}

// A device pointer the launch reads or writes: refused unless non-null and `align`-byte aligned,
// as "<what>: <field> must be <expected>".
struct PointerRule {
    const void *p;
    std::uintptr_t align;
    const char *field;
    const char *expected;
};
std::optional<Fp8Refusal> check_pointers(const char *what, std::initializer_list<PointerRule> rules) {
    for (const PointerRule &rule : rules)
        if (!rule.p || !aligned_to(rule.p, rule.align))
            return refuse(Status::invalid_argument, "{}: {} must be {}", what, rule.field, rule.expected);
    return std::nullopt;
}
constexpr const char *kOffsetsRule = "a non-null int32 [E+1]";

std::optional<Fp8Refusal> check_rows(std::int64_t rows, const char *what) {
    if (rows < 0 || rows > kMaxDim)
        return refuse(Status::invalid_argument, "{}: rows = {}: expected 0 <= rows < 2^31", what, rows);
    return std::nullopt;
}

std::optional<Fp8Refusal> check_out_dtype(DType dtype, const char *what, const char *field) {
    if (dtype != DType::bf16 && dtype != DType::fp32)
        return refuse(Status::unsupported, "{}: {} = {}: expected bf16 or fp32", what, field, dtype_name(dtype));
    return std::nullopt;
}

// The GEMMs' operand ring and row-block walk.
std::optional<Fp8Refusal> check_pipeline(int stages, int group_m, const char *what) {
    if (stages < 2 || stages > 8)
        return refuse(Status::unsupported, "{}: stages = {}: expected 2..8", what, stages);
    if (group_m < 1 || group_m > 64)
        return refuse(Status::unsupported, "{}: group_m = {}: expected 1..64", what, group_m);
    return std::nullopt;
}

// A launch's dynamic shared memory (smem_bytes) against sm_90a's per-block limit.
std::optional<Fp8Refusal> check_smem(std::size_t smem_bytes, int stages, std::int32_t experts, const char *what) {
    const std::size_t smem = smem_bytes + kStaticSmemSlack;
    if (smem > smem_limits(kHopper).per_block)
        return refuse(Status::unsupported, "{}: {} stages with {} experts need {} bytes of shared memory, sm_90a allows {}",
                      what, stages, experts, smem, smem_limits(kHopper).per_block);
    return std::nullopt;
}

// Operands name at least one expert (without them the checks assume one).
template <class Ops> std::optional<Fp8Refusal> check_experts(const Ops *ops, const char *what) {
    if (ops && ops->num_experts < 1)
        return refuse(Status::invalid_argument, "{}: num_experts = {}: expected >= 1", what, ops->num_experts);
    return std::nullopt;
}

std::optional<Fp8Refusal> check_padded_rows(std::int64_t padded_rows, std::int64_t rows, std::int32_t experts,
                                            const char *what) {
    const std::int64_t need = fp8_wgrad_padded_rows(rows, experts);
    if (padded_rows < need || padded_rows % 128 != 0 || padded_rows > kMaxDim)
        return refuse(Status::invalid_argument,
                      "{}: padded_rows = {}: expected a multiple of 128, at least fp8_wgrad_padded_rows(rows, E) = {}",
                      what, padded_rows, need);
    return std::nullopt;
}

std::optional<Fp8Refusal> check_quant_k(std::int64_t k, const char *what) {
    if (k <= 0 || k % 16 != 0 || k > kMaxDim)
        return refuse(Status::unsupported, "{}: k = {}: the quantizers support k a positive multiple of 16", what, k);
    return std::nullopt;
}

}  // namespace

std::optional<Fp8Refusal> can_implement(const std::string &arch, const Fp8QuantRowsSpec &spec,
                                        const Fp8QuantRowsOperands *ops) {
    const char *what = "fp8_quantize_rows";
    if (auto r = check_arch(arch, what)) return r;
    if (auto r = check_quant_k(spec.k, what)) return r;
    if (!ops) return std::nullopt;
    if (auto r = check_rows(ops->rows, what)) return r;
    if (ops->rows == 0) return std::nullopt;
    return check_pointers(what, {{ops->x, 8, "x", "a non-null, 8-byte aligned bf16 [rows, k]"},
                                 {ops->q, 4, "q", "a non-null, 4-byte aligned e4m3 [rows, k]"},
                                 {ops->scales, 4, "scales", "a non-null fp32 [rows, ceil(k/128)]"}});
}

std::optional<Fp8Refusal> can_implement(const std::string &arch, const Fp8QuantBlocksSpec &spec,
                                        const Fp8QuantBlocksOperands *ops) {
    const char *what = "fp8_quantize_blocks";
    if (auto r = check_arch(arch, what)) return r;
    if (auto r = check_quant_k(spec.k, what)) return r;
    if (spec.n <= 0 || spec.n > kMaxDim)
        return refuse(Status::unsupported, "{}: n = {}: expected 1 <= n < 2^31", what, spec.n);
    if (!ops) return std::nullopt;
    if (ops->num_experts < 1)
        return refuse(Status::invalid_argument, "{}: num_experts = {}: expected >= 1", what, ops->num_experts);
    return check_pointers(what, {{ops->w, 16, "w", "a non-null, 16-byte aligned bf16 [E, n, k]"},
                                 {ops->q, 8, "q", "a non-null, 8-byte aligned e4m3 [E, n, k]"},
                                 {ops->scales, 4, "scales", "a non-null fp32 [E, ceil(n/128), ceil(k/128)]"}});
}

std::optional<Fp8Refusal> can_implement(const std::string &arch, const Fp8GemmSpec &spec, const Fp8GemmOperands *ops) {
    const char *what = "fp8_group_gemm_nk";
    if (auto r = check_arch(arch, what)) return r;
    if (spec.n <= 0 || spec.n % 128 != 0 || spec.n > kMaxDim)
        return refuse(Status::unsupported,
                      "{}: n = {}: the FP8 GEMM supports n a positive multiple of 128 (B's 128 x 128 scale blocks)",
                      what, spec.n);
    if (spec.k <= 0 || spec.k % 128 != 0 || spec.k > kMaxDim)
        return refuse(Status::unsupported,
                      "{}: k = {}: the FP8 GEMM supports k a positive multiple of 128 (the 1 x 128 and 128 x 128 "
                      "scale blocks)",
                      what, spec.k);
    if (auto r = check_out_dtype(spec.c_dtype, what, "c_dtype")) return r;
    if (spec.block_n != 128 && spec.block_n != 256)
        return refuse(Status::unsupported, "{}: block_n = {}: the FP8 GEMM supports 128 and 256", what, spec.block_n);
    if (spec.n % spec.block_n != 0)
        return refuse(Status::unsupported, "{}: n = {}: with block_n = {} n must be a multiple of {} (use block_n 128)",
                      what, spec.n, spec.block_n, spec.block_n);
    if (auto r = check_pipeline(spec.stages, spec.group_m, what)) return r;
    if (spec.overlap && (!spec.promote || spec.block_n != 128))
        return refuse(Status::unsupported, "{}: overlap needs promote and block_n = 128 (got promote = {}, block_n = {})",
                      what, spec.promote, spec.block_n);
    if (spec.tma_store && spec.c_dtype != DType::bf16)
        return refuse(Status::unsupported, "{}: tma_store needs a bf16 C (got {})", what, dtype_name(spec.c_dtype));
    if (auto r = check_experts(ops, what)) return r;
    const std::int32_t experts = ops ? ops->num_experts : 1;
    if (auto r = check_smem(fp8_gemm_smem_bytes(spec, experts), spec.stages, experts, what)) return r;
    if (!ops) return std::nullopt;
    if (auto r = check_rows(ops->rows, what)) return r;
    if (ops->rows == 0) return std::nullopt;
    if (auto r = check_pointers(what, {{ops->a, 16, "a", "a non-null, 16-byte aligned e4m3 [rows, k]"},
                                       {ops->b, 16, "b", "a non-null, 16-byte aligned e4m3 [E, n, k]"},
                                       {ops->a_scale, 4, "a_scale", "a non-null fp32 [rows, k/128]"},
                                       {ops->b_scale, 4, "b_scale", "a non-null fp32 [E, n/128, k/128]"}}))
        return r;
    if (!ops->c || !aligned_to(ops->c, 4))
        return refuse(Status::invalid_argument, "{}: c must be a non-null, 4-byte aligned {} [rows, n]", what,
                      dtype_name(spec.c_dtype));
    return check_pointers(what, {{ops->offsets, 4, "offsets", kOffsetsRule}});
}

// ------------------------------------------------------------------ weight gradients

std::optional<Fp8Refusal> can_implement(const std::string &arch, const Fp8QuantColsSpec &spec,
                                        const Fp8QuantColsOperands *ops) {
    const char *what = "fp8_quantize_cols";
    if (auto r = check_arch(arch, what)) return r;
    if (spec.c <= 0 || spec.c % 64 != 0 || spec.c > kMaxDim)
        return refuse(Status::unsupported, "{}: c = {}: the column quantizer supports c a positive multiple of 64",
                      what, spec.c);
    if (!ops) return std::nullopt;
    if (auto r = check_rows(ops->rows, what)) return r;
    if (ops->num_experts < 1 || ops->num_experts > kMaxQuantColsExperts)
        return refuse(Status::invalid_argument, "{}: num_experts = {}: expected 1..{} (cum[E+1] in shared memory)",
                      what, ops->num_experts, kMaxQuantColsExperts);
    if (auto r = check_padded_rows(ops->padded_rows, ops->rows, ops->num_experts, what)) return r;
    if (ops->rows == 0) return std::nullopt;
    if (ops->row_token) {
        if (ops->tokens < 0 || ops->tokens > kMaxDim)
            return refuse(Status::invalid_argument, "{}: tokens = {}: expected 0 <= tokens < 2^31 with row_token",
                          what, ops->tokens);
        if (auto r = check_pointers(what, {{ops->row_token, 4, "row_token", "an int32 [rows] token index"}})) return r;
    }
    return check_pointers(what, {{ops->x, 16, "x", "a non-null, 16-byte aligned bf16 [rows, c] ([tokens, c] with row_token)"},
                                 {ops->offsets, 4, "offsets", kOffsetsRule},
                                 {ops->q, 16, "q", "a non-null, 16-byte aligned e4m3 [c, padded_rows]"},
                                 {ops->scales, 4, "scales", "a non-null fp32 [padded_rows / 128, c]"}});
}

std::optional<Fp8Refusal> can_implement(const std::string &arch, const Fp8WgradSpec &spec,
                                        const Fp8WgradGemmOperands *ops) {
    const char *what = "fp8_wgrad_gemm";
    if (auto r = check_arch(arch, what)) return r;
    if (spec.m <= 0 || spec.m % 128 != 0 || spec.m > kMaxDim)
        return refuse(Status::unsupported, "{}: m = {}: the FP8 weight gradient supports m a positive multiple of 128",
                      what, spec.m);
    if (spec.n <= 0 || spec.n % 128 != 0 || spec.n > kMaxDim)
        return refuse(Status::unsupported, "{}: n = {}: the FP8 weight gradient supports n a positive multiple of 128",
                      what, spec.n);
    if (auto r = check_out_dtype(spec.c_dtype, what, "c_dtype")) return r;
    if (auto r = check_pipeline(spec.stages, spec.group_m, what)) return r;
    if (spec.tma_store && (spec.c_dtype != DType::bf16 || spec.accumulate))
        return refuse(Status::unsupported, "{}: tma_store needs a bf16 dW that is not accumulated into (got {}{})",
                      what, dtype_name(spec.c_dtype), spec.accumulate ? ", accumulate" : "");
    if (auto r = check_experts(ops, what)) return r;
    const std::int32_t experts = ops ? ops->num_experts : 1;
    if (std::int64_t{experts} * (spec.m / 128) * (spec.n / 128) > kMaxDim)
        return refuse(Status::unsupported, "{}: E x m/128 x n/128 tiles must stay below 2^31", what);
    if (auto r = check_smem(fp8_wgrad_smem_bytes(spec, experts), spec.stages, experts, what)) return r;
    if (!ops) return std::nullopt;
    if (ops->rows < 1 || ops->rows > kMaxDim)
        return refuse(Status::invalid_argument, "{}: rows = {}: expected 1 <= rows < 2^31 (fp8_weight_grad handles 0)",
                      what, ops->rows);
    if (auto r = check_padded_rows(ops->padded_rows, ops->rows, ops->num_experts, what)) return r;
    if (auto r = check_pointers(
            what, {{ops->a, 16, "a", "a non-null, 16-byte aligned e4m3 [m, padded_rows]"},
                   {ops->b, 16, "b", "a non-null, 16-byte aligned e4m3 [n, padded_rows]"},
                   {ops->a_scale, 16, "a_scale", "a non-null, 16-byte aligned fp32 [padded_rows / 128, m]"},
                   {ops->b_scale, 16, "b_scale", "a non-null, 16-byte aligned fp32 [padded_rows / 128, n]"}}))
        return r;
    const std::uintptr_t c_align = 2 * dtype_size(spec.c_dtype);
    if (!ops->c || !aligned_to(ops->c, c_align))
        return refuse(Status::invalid_argument, "{}: c must be a non-null, {}-byte aligned {} [E, m, n]", what, c_align,
                      dtype_name(spec.c_dtype));
    return check_pointers(what, {{ops->offsets, 4, "offsets", kOffsetsRule}});
}

std::optional<Fp8Refusal> can_implement(const std::string &arch, const Fp8WgradArgs &args) {
    const char *what = "fp8_weight_grad";
    if (auto r = check_arch(arch, what)) return r;
    for (auto [name, v] : {std::pair<const char *, std::int64_t>{"m", args.m}, {"n", args.n}})
        if (v <= 0 || v % 128 != 0 || v > kMaxDim)
            return refuse(Status::unsupported, "{}: {} = {}: the FP8 weight gradient supports a positive multiple of 128",
                          what, name, v);
    if (auto r = check_out_dtype(args.dw_dtype, what, "dw_dtype")) return r;
    if (args.num_experts < 1)
        return refuse(Status::invalid_argument, "{}: num_experts = {}: expected >= 1", what, args.num_experts);
    if (auto r = check_rows(args.rows, what)) return r;
    const std::uintptr_t dw_align = 2 * dtype_size(args.dw_dtype);
    if (!args.dw || !aligned_to(args.dw, dw_align))
        return refuse(Status::invalid_argument, "{}: dw must be a non-null, {}-byte aligned {} [E, m, n]", what,
                      dw_align, dtype_name(args.dw_dtype));
    if (args.rows == 0) return std::nullopt;
    if ((args.gather_a || args.gather_b) && (!args.row_token || args.tokens < 0 || args.tokens > kMaxDim))
        return refuse(Status::invalid_argument,
                      "{}: gather_a/gather_b need row_token (int32 [rows]) and 0 <= tokens < 2^31 (tokens = {})", what,
                      args.tokens);
    if (auto r = check_pointers(what, {{args.a, 16, "a", "a non-null, 16-byte aligned bf16 [rows, m] ([tokens, m] gathered)"},
                                       {args.b, 16, "b", "a non-null, 16-byte aligned bf16 [rows, n] ([tokens, n] gathered)"},
                                       {args.offsets, 4, "offsets", kOffsetsRule}}))
        return r;
    const std::size_t need = fp8_weight_grad_workspace_bytes(args.rows, args.num_experts, args.m, args.n);
    if (args.workspace_bytes < need)
        return refuse(Status::invalid_argument,
                      "{}: workspace_bytes = {}: expected at least fp8_weight_grad_workspace_bytes(rows, E, m, n) = {}",
                      what, args.workspace_bytes, need);
    return check_pointers(what, {{args.workspace, 256, "workspace", "a non-null, 256-byte aligned device buffer"}});
}

}  // namespace moejit
