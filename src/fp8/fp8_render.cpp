// The FP8 family's pure parts: specs, shared memory, and the translation unit of each kernel.
#include <algorithm>

#include <fmt/format.h>

#include "fp8/fp8.hpp"
#include "gemm/gemm_common.hpp"
#include "gemm/tile_config.hpp"

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

}  // namespace moejit
