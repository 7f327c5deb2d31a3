// The FP8 family's pure parts: specs, shared memory, and the translation unit of each kernel.
#include <algorithm>

#include <fmt/format.h>

#include "fp8/fp8.hpp"
#include "gemm/gemm_common.hpp"
#include "gemm/tile_config.hpp"
#include "gemm/tile_schedule.hpp"

namespace moejit {
namespace {

constexpr int kQuantThreads = 256;
constexpr int kMaxStages = 6;

[[noreturn]] void throw_refusal(const Fp8Refusal &r) { throw Error(r.status, r.message); }

}  // namespace

std::size_t fp8_gemm_smem_bytes(const Fp8GemmSpec &s, std::int32_t num_experts) {
    // Host mirror of carve_smem (sm90/pipeline.cuh) with sm90::fp8::Config: 1 KiB alignment
    // slack, STAGES x (A 128 x 128 + B BN x 128 bytes), the bf16 C staging (64 x BN per
    // consumer), a full and an empty mbarrier per stage, 16 ints of scan scratch, cum[E+1].
    const std::size_t stages = static_cast<std::size_t>(std::max(s.stages, 0));
    std::size_t bytes = 1024 + stages * static_cast<std::size_t>(128 + s.block_n) * 128;
    if (s.tma_store) bytes += static_cast<std::size_t>(128) * s.block_n * 2;
    bytes += stages * 16 + 16 * sizeof(int);
    bytes += (static_cast<std::size_t>(std::max(num_experts, 0)) + 1) * sizeof(int);
    return (bytes + 15) / 16 * 16;
}

int fp8_gemm_max_stages(const Fp8GemmSpec &spec, std::int32_t num_experts) {
    Fp8GemmSpec s = spec;
    for (s.stages = kMaxStages; s.stages > 2; --s.stages)
        if (fp8_gemm_smem_bytes(s, num_experts) + 256 <= smem_limits(90).per_block) break;
    return s.stages;
}

Fp8GemmSpec make_fp8_gemm_spec(std::int64_t n, std::int64_t k, DType c_dtype, std::int32_t num_experts,
                               int block_n) {
    Fp8GemmSpec s;
    s.block_n = block_n;
    s.n = n;
    s.k = k;
    s.c_dtype = c_dtype;
    s.tma_store = c_dtype == DType::bf16;
    s.stages = fp8_gemm_max_stages(s, num_experts);
    return s;
}

KernelSource render_fp8_quant_rows(const Fp8QuantRowsSpec &spec) {
    if (auto r = can_implement("sm_90a", spec)) throw_refusal(*r);
    const std::string name = fmt::format("fp8_quant_rows_bf16_k{}", spec.k);
    return instantiate_kernel<kargs::Fp8QuantRowsArgs>(
        {name, "fp8_quant.cuh", "FP8 quantizer, 1 x 128 tiles: " + name, "", "moejit::quant::quantize_rows_kernel",
         fmt::format("{}, {}", kQuantThreads, spec.k)});
}

KernelSource render_fp8_quant_blocks(const Fp8QuantBlocksSpec &spec) {
    if (auto r = can_implement("sm_90a", spec)) throw_refusal(*r);
    const std::string name = fmt::format("fp8_quant_blocks_bf16_n{}_k{}", spec.n, spec.k);
    return instantiate_kernel<kargs::Fp8QuantBlocksArgs>(
        {name, "fp8_quant.cuh", "FP8 quantizer, 128 x 128 blocks: " + name, "",
         "moejit::quant::quantize_blocks_kernel", fmt::format("{}, {}", spec.n, spec.k)});
}

KernelSource render_fp8_group_gemm_nk(const Fp8GemmSpec &s) {
    if (auto r = can_implement("sm_90a", s)) throw_refusal(*r);
    const std::string name =
        fmt::format("fp8_gemm_nk_e4m3_c{}_n{}_k{}_bn{}_s{}_g{}{}{}{}", dtype_name(s.c_dtype), s.n, s.k, s.block_n,
                    s.stages, s.group_m, s.tma_store ? "_tma" : "", s.promote ? "" : "_nopromote",
                    s.overlap ? "_overlap" : "");
    GemmUnit u = gemm_unit("nk", name, fmt::format("{}, {}", s.n, s.k));
    u.title = ", sm_90a FP8 e4m3 block-scaled";
    u.template_name = "sm90/fp8_gemm.cuh";
    u.ns = "moejit::sm90::fp8";
    u.cfg = fmt::format("moejit::sm90::fp8::Config<{}, {}, {}, {}, {}, {}, {}>", dtype_cuda_type(s.c_dtype),
                        s.block_n, s.stages, s.group_m, bool_text(s.tma_store), bool_text(s.promote),
                        bool_text(s.overlap));
    u.bounds = "384";  // a producer and two consumer warpgroups
    return render_gemm_unit<kargs::Sm90Fp8NkArgs>(u);
}

// ------------------------------------------------------------------ weight gradients

std::int64_t fp8_wgrad_padded_rows(std::int64_t rows, std::int32_t num_experts) {
    return 128 * m_tile_bound(rows, num_experts, 128);
}

std::size_t fp8_wgrad_smem_bytes(const Fp8WgradSpec &s, std::int32_t num_experts) {
    // The same carve as the same_nk FP8 GEMM with block_n 128 (sm90/fp8_wgrad.cuh uses its Config).
    Fp8GemmSpec g;
    g.block_n = 128;
    g.stages = s.stages;
    g.tma_store = s.tma_store;
    const std::size_t scales = s.overlap ? static_cast<std::size_t>(std::max(s.stages, 0)) * 1024 : 0;  // per stage
    return fp8_gemm_smem_bytes(g, num_experts) + scales;
}

Fp8WgradSpec make_fp8_wgrad_spec(std::int64_t m, std::int64_t n, DType c_dtype, std::int32_t num_experts,
                                 bool accumulate, bool overlap) {
    Fp8WgradSpec s;
    s.overlap = overlap;
    s.m = m;
    s.n = n;
    s.c_dtype = c_dtype;
    s.accumulate = accumulate;
    s.tma_store = c_dtype == DType::bf16 && !accumulate;
    for (s.stages = kMaxStages; s.stages > 2; --s.stages)
        if (fp8_wgrad_smem_bytes(s, num_experts) + 256 <= smem_limits(90).per_block) break;
    return s;
}

KernelSource render_fp8_quant_cols(const Fp8QuantColsSpec &spec) {
    if (auto r = can_implement("sm_90a", spec)) throw_refusal(*r);
    const std::string name = fmt::format("fp8_quant_cols_bf16_c{}", spec.c);
    return instantiate_kernel<kargs::Fp8QuantColsArgs>(
        {name, "fp8_quant.cuh", "FP8 quantizer, 128 x 1 tiles of expert-padded rows, transposed: " + name, "",
         "moejit::quant::quantize_cols_kernel", fmt::format("{}", spec.c)});
}

KernelSource render_fp8_wgrad_gemm(const Fp8WgradSpec &s) {
    if (auto r = can_implement("sm_90a", s)) throw_refusal(*r);
    const std::string name = fmt::format("fp8_wgrad_e4m3_c{}_m{}_n{}_s{}_g{}{}{}{}", dtype_name(s.c_dtype), s.m, s.n,
                                         s.stages, s.group_m, s.tma_store ? "_tma" : "", s.accumulate ? "_acc" : "",
                                         s.overlap ? "_overlap" : "");
    const std::string cfg = fmt::format("moejit::sm90::fp8::WgradConfig<{}, {}, {}, {}, {}>", dtype_cuda_type(s.c_dtype),
                                        s.stages, s.group_m, bool_text(s.tma_store), bool_text(s.overlap));
    return instantiate_kernel<kargs::Sm90Fp8WgradArgs>(
        {name, "sm90/fp8_wgrad.cuh", "FP8 weight-gradient grouped GEMM, sm_90a e4m3 128 x 1 scales: " + name,
         fmt::format("using Cfg = {};\n", cfg), "moejit::sm90::fp8::group_gemm_wgrad_kernel",
         fmt::format("384, Cfg, {}, {}, {}", s.m, s.n, bool_text(s.accumulate))});
}

}  // namespace moejit
