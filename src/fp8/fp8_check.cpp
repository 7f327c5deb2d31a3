// The FP8 family's one validator: every refusal names the field and what is supported.
#include <cstdint>
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
    if (ops->rows < 0 || ops->rows > kMaxDim)
        return refuse(Status::invalid_argument, "{}: rows = {}: expected 0 <= rows < 2^31", what, ops->rows);
    if (ops->rows == 0) return std::nullopt;
    if (!ops->x || !aligned_to(ops->x, 8))
        return refuse(Status::invalid_argument, "{}: x must be a non-null, 8-byte aligned bf16 [rows, k]", what);
    if (!ops->q || !aligned_to(ops->q, 4))
        return refuse(Status::invalid_argument, "{}: q must be a non-null, 4-byte aligned e4m3 [rows, k]", what);
    if (!ops->scales || !aligned_to(ops->scales, 4))
        return refuse(Status::invalid_argument, "{}: scales must be a non-null fp32 [rows, ceil(k/128)]", what);
    return std::nullopt;
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
    if (!ops->w || !aligned_to(ops->w, 16))
        return refuse(Status::invalid_argument, "{}: w must be a non-null, 16-byte aligned bf16 [E, n, k]", what);
    if (!ops->q || !aligned_to(ops->q, 8))
        return refuse(Status::invalid_argument, "{}: q must be a non-null, 8-byte aligned e4m3 [E, n, k]", what);
    if (!ops->scales || !aligned_to(ops->scales, 4))
        return refuse(Status::invalid_argument, "{}: scales must be a non-null fp32 [E, ceil(n/128), ceil(k/128)]",
                      what);
    return std::nullopt;
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
    if (spec.c_dtype != DType::bf16 && spec.c_dtype != DType::fp32)
        return refuse(Status::unsupported, "{}: c_dtype = {}: expected bf16 or fp32", what, dtype_name(spec.c_dtype));
    if (spec.block_n != 128 && spec.block_n != 256)
        return refuse(Status::unsupported, "{}: block_n = {}: the FP8 GEMM supports 128 and 256", what, spec.block_n);
    if (spec.n % spec.block_n != 0)
        return refuse(Status::unsupported, "{}: n = {}: with block_n = {} n must be a multiple of {} (use block_n 128)",
                      what, spec.n, spec.block_n, spec.block_n);
    if (spec.stages < 2 || spec.stages > 8)
        return refuse(Status::unsupported, "{}: stages = {}: expected 2..8", what, spec.stages);
    if (spec.group_m < 1 || spec.group_m > 64)
        return refuse(Status::unsupported, "{}: group_m = {}: expected 1..64", what, spec.group_m);
    if (spec.overlap && (!spec.promote || spec.block_n != 128))
        return refuse(Status::unsupported, "{}: overlap needs promote and block_n = 128 (got promote = {}, block_n = {})",
                      what, spec.promote, spec.block_n);
    if (spec.tma_store && spec.c_dtype != DType::bf16)
        return refuse(Status::unsupported, "{}: tma_store needs a bf16 C (got {})", what, dtype_name(spec.c_dtype));
    const std::int32_t experts = ops ? ops->num_experts : 1;
    if (ops && experts < 1)
        return refuse(Status::invalid_argument, "{}: num_experts = {}: expected >= 1", what, experts);
    const std::size_t smem = fp8_gemm_smem_bytes(spec, experts) + kStaticSmemSlack;
    if (smem > smem_limits(kHopper).per_block)
        return refuse(Status::unsupported, "{}: {} stages with {} experts need {} bytes of shared memory, sm_90a allows {}",
                      what, spec.stages, experts, smem, smem_limits(kHopper).per_block);
    if (!ops) return std::nullopt;
    if (ops->rows < 0 || ops->rows > kMaxDim)
        return refuse(Status::invalid_argument, "{}: rows = {}: expected 0 <= rows < 2^31", what, ops->rows);
    if (ops->rows == 0) return std::nullopt;
    if (!ops->a || !aligned_to(ops->a, 16))
        return refuse(Status::invalid_argument, "{}: a must be a non-null, 16-byte aligned e4m3 [rows, k]", what);
    if (!ops->b || !aligned_to(ops->b, 16))
        return refuse(Status::invalid_argument, "{}: b must be a non-null, 16-byte aligned e4m3 [E, n, k]", what);
    if (!ops->a_scale || !aligned_to(ops->a_scale, 4))
        return refuse(Status::invalid_argument, "{}: a_scale must be a non-null fp32 [rows, k/128]", what);
    if (!ops->b_scale || !aligned_to(ops->b_scale, 4))
        return refuse(Status::invalid_argument, "{}: b_scale must be a non-null fp32 [E, n/128, k/128]", what);
    if (!ops->c || !aligned_to(ops->c, 4))
        return refuse(Status::invalid_argument, "{}: c must be a non-null, 4-byte aligned {} [rows, n]", what,
                      dtype_name(spec.c_dtype));
    if (!ops->offsets || !aligned_to(ops->offsets, 4))
        return refuse(Status::invalid_argument, "{}: offsets must be a non-null int32 [E+1]", what);
    return std::nullopt;
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
    if (ops->rows < 0 || ops->rows > kMaxDim)
        return refuse(Status::invalid_argument, "{}: rows = {}: expected 0 <= rows < 2^31", what, ops->rows);
    if (ops->num_experts < 1 || ops->num_experts > kMaxQuantColsExperts)
        return refuse(Status::invalid_argument, "{}: num_experts = {}: expected 1..{} (cum[E+1] in shared memory)",
                      what, ops->num_experts, kMaxQuantColsExperts);
    const std::int64_t need = fp8_wgrad_padded_rows(ops->rows, ops->num_experts);
    if (ops->padded_rows < need || ops->padded_rows % 128 != 0 || ops->padded_rows > kMaxDim)
        return refuse(Status::invalid_argument,
                      "{}: padded_rows = {}: expected a multiple of 128, at least fp8_wgrad_padded_rows(rows, E) = {}",
                      what, ops->padded_rows, need);
    if (ops->rows == 0) return std::nullopt;
    if (!ops->x || !aligned_to(ops->x, 16))
        return refuse(Status::invalid_argument, "{}: x must be a non-null, 16-byte aligned bf16 [rows, c]", what);
    if (!ops->offsets || !aligned_to(ops->offsets, 4))
        return refuse(Status::invalid_argument, "{}: offsets must be a non-null int32 [E+1]", what);
    if (!ops->q || !aligned_to(ops->q, 16))
        return refuse(Status::invalid_argument, "{}: q must be a non-null, 16-byte aligned e4m3 [c, padded_rows]",
                      what);
    if (!ops->scales || !aligned_to(ops->scales, 4))
        return refuse(Status::invalid_argument, "{}: scales must be a non-null fp32 [padded_rows / 128, c]", what);
    return std::nullopt;
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
    if (spec.c_dtype != DType::bf16 && spec.c_dtype != DType::fp32)
        return refuse(Status::unsupported, "{}: c_dtype = {}: expected bf16 or fp32", what, dtype_name(spec.c_dtype));
    if (spec.stages < 2 || spec.stages > 8)
        return refuse(Status::unsupported, "{}: stages = {}: expected 2..8", what, spec.stages);
    if (spec.group_m < 1 || spec.group_m > 64)
        return refuse(Status::unsupported, "{}: group_m = {}: expected 1..64", what, spec.group_m);
    if (spec.tma_store && (spec.c_dtype != DType::bf16 || spec.accumulate))
        return refuse(Status::unsupported, "{}: tma_store needs a bf16 dW that is not accumulated into (got {}{})",
                      what, dtype_name(spec.c_dtype), spec.accumulate ? ", accumulate" : "");
    const std::int32_t experts = ops ? ops->num_experts : 1;
    if (ops && experts < 1)
        return refuse(Status::invalid_argument, "{}: num_experts = {}: expected >= 1", what, experts);
    if (std::int64_t{experts} * (spec.m / 128) * (spec.n / 128) > kMaxDim)
        return refuse(Status::unsupported, "{}: E x m/128 x n/128 tiles must stay below 2^31", what);
    const std::size_t smem = fp8_wgrad_smem_bytes(spec, experts) + kStaticSmemSlack;
    if (smem > smem_limits(kHopper).per_block)
        return refuse(Status::unsupported, "{}: {} stages with {} experts need {} bytes of shared memory, sm_90a allows {}",
                      what, spec.stages, experts, smem, smem_limits(kHopper).per_block);
    if (!ops) return std::nullopt;
    if (ops->rows < 1 || ops->rows > kMaxDim)
        return refuse(Status::invalid_argument, "{}: rows = {}: expected 1 <= rows < 2^31 (fp8_weight_grad handles 0)",
                      what, ops->rows);
    const std::int64_t need = fp8_wgrad_padded_rows(ops->rows, ops->num_experts);
    if (ops->padded_rows < need || ops->padded_rows % 128 != 0 || ops->padded_rows > kMaxDim)
        return refuse(Status::invalid_argument,
                      "{}: padded_rows = {}: expected a multiple of 128, at least fp8_wgrad_padded_rows(rows, E) = {}",
                      what, ops->padded_rows, need);
    if (!ops->a || !aligned_to(ops->a, 16))
        return refuse(Status::invalid_argument, "{}: a must be a non-null, 16-byte aligned e4m3 [m, padded_rows]", what);
    if (!ops->b || !aligned_to(ops->b, 16))
        return refuse(Status::invalid_argument, "{}: b must be a non-null, 16-byte aligned e4m3 [n, padded_rows]", what);
    if (!ops->a_scale || !aligned_to(ops->a_scale, 16))
        return refuse(Status::invalid_argument, "{}: a_scale must be a non-null, 16-byte aligned fp32 [padded_rows / 128, m]",
                      what);
    if (!ops->b_scale || !aligned_to(ops->b_scale, 16))
        return refuse(Status::invalid_argument, "{}: b_scale must be a non-null, 16-byte aligned fp32 [padded_rows / 128, n]",
                      what);
    const std::uintptr_t c_align = 2 * dtype_size(spec.c_dtype);
    if (!ops->c || !aligned_to(ops->c, c_align))
        return refuse(Status::invalid_argument, "{}: c must be a non-null, {}-byte aligned {} [E, m, n]", what, c_align,
                      dtype_name(spec.c_dtype));
    if (!ops->offsets || !aligned_to(ops->offsets, 4))
        return refuse(Status::invalid_argument, "{}: offsets must be a non-null int32 [E+1]", what);
    return std::nullopt;
}

std::optional<Fp8Refusal> can_implement(const std::string &arch, const Fp8WgradArgs &args) {
    const char *what = "fp8_weight_grad";
    if (auto r = check_arch(arch, what)) return r;
    for (auto [name, v] : {std::pair<const char *, std::int64_t>{"m", args.m}, {"n", args.n}})
        if (v <= 0 || v % 128 != 0 || v > kMaxDim)
            return refuse(Status::unsupported, "{}: {} = {}: the FP8 weight gradient supports a positive multiple of 128",
                          what, name, v);
    if (args.dw_dtype != DType::bf16 && args.dw_dtype != DType::fp32)
        return refuse(Status::unsupported, "{}: dw_dtype = {}: expected bf16 or fp32", what, dtype_name(args.dw_dtype));
    if (args.num_experts < 1)
        return refuse(Status::invalid_argument, "{}: num_experts = {}: expected >= 1", what, args.num_experts);
    if (args.rows < 0 || args.rows > kMaxDim)
        return refuse(Status::invalid_argument, "{}: rows = {}: expected 0 <= rows < 2^31", what, args.rows);
    const std::uintptr_t dw_align = 2 * dtype_size(args.dw_dtype);
    if (!args.dw || !aligned_to(args.dw, dw_align))
        return refuse(Status::invalid_argument, "{}: dw must be a non-null, {}-byte aligned {} [E, m, n]", what,
                      dw_align, dtype_name(args.dw_dtype));
    if (args.rows == 0) return std::nullopt;
    if (!args.a || !aligned_to(args.a, 16))
        return refuse(Status::invalid_argument, "{}: a must be a non-null, 16-byte aligned bf16 [rows, m]", what);
    if (!args.b || !aligned_to(args.b, 16))
        return refuse(Status::invalid_argument, "{}: b must be a non-null, 16-byte aligned bf16 [rows, n]", what);
    if (!args.offsets || !aligned_to(args.offsets, 4))
        return refuse(Status::invalid_argument, "{}: offsets must be a non-null int32 [E+1]", what);
    const std::size_t need = fp8_weight_grad_workspace_bytes(args.rows, args.num_experts, args.m, args.n);
    if (args.workspace_bytes < need)
        return refuse(Status::invalid_argument,
                      "{}: workspace_bytes = {}: expected at least fp8_weight_grad_workspace_bytes(rows, E, m, n) = {}",
                      what, args.workspace_bytes, need);
    if (!args.workspace || !aligned_to(args.workspace, 256))
        return refuse(Status::invalid_argument, "{}: workspace must be a non-null, 256-byte aligned device buffer", what);
    return std::nullopt;
}

}  // namespace moejit
