#include "moe/plan_layout.hpp"

#include <algorithm>
#include <limits>

#include "base/checked_math.hpp"
#include "base/dtype.hpp"
#include "moe/layer_gemms.hpp"
#include "moe/plan_fp8.hpp"
#include "ops/expert_bias.hpp"
#include "ops/routing.hpp"

namespace moejit {
namespace {

// Each region's bytes are linear in T (or R) with the constant of the T-independent regions,
// and each start pads by less than the alignment: size(n) <= payload(n) + regions·alignment,
// with payload(n) = payload(0) + n·(payload(1) - payload(0)) exactly.
template <class Layout> SizeTerms size_terms(const Layout &zero, const Layout &one) {
    SizeTerms t;
    t.per_unit = static_cast<std::int64_t>(one.saved_payload - zero.saved_payload);
    t.constant = static_cast<std::int64_t>(zero.saved_payload + zero.saved_regions * kRegionAlignment);
    return t;
}

}  // namespace

PlanLayout::PlanLayout(const PlanDesc &desc, std::int64_t num_tokens, bool gathered_rows,
                       const char *tokens_arg)
    : tokens(num_tokens), rows(checked_rows(num_tokens, desc.top_k, tokens_arg)), gathered(gathered_rows) {
    // S <= 2^31-1 now; H, I and E come from a validated desc but have no upper bound, so every
    // byte count is still a checked product (blamed on T, the value that varies per call).
    const std::int64_t S = rows, H = desc.hidden_size, I = desc.intermediate_size, E = desc.num_experts;
    const std::int64_t el = static_cast<std::int64_t>(dtype_size(desc.dtype));
    const char *arg = tokens_arg;
    auto bytes = [arg](std::initializer_list<std::int64_t> f) { return checked_bytes(f, arg); };

    RegionAllocator saved{arg};
    offsets = saved.take(bytes({E + 1, 4}));
    scatter_index = saved.take(bytes({S, 4}));
    if (gathered) row_token = saved.take(bytes({S, 4}));
    w_s = saved.take(bytes({S, 4}));
    gate_up = saved.take(bytes({S, 2, I, el}));
    saved_bytes = saved.end;
    saved_payload = saved.payload;
    saved_regions = saved.regions;

    RegionAllocator fwd{arg}, bwd{arg};
    xs = bwd.take(bytes({S, H, el}));
    if (!gathered) fwd = bwd;  // forward scatters x to the same place
    counts = fwd.take(bytes({E, 4}));
    routing = fwd.take(routing_index_workspace_size(num_tokens, desc.top_k, desc.num_experts));
    y = fwd.take(bytes({S, H, el}));
    // a·w is not kept for the backward: its SwiGLU backward recomputes it from g and u into daw
    // (S·I elements fewer kept between the calls, DESIGN.md §2.7).
    aw = fwd.take(bytes({S, I, el}));

    // Backward: one [S,H] region holds dy's rows (fc2's dgrad and weight gradient), then x's
    // rows (fc1's weight gradient), then dxs (fc1's dgrad, last): 2·S·H elements fewer than
    // three regions (DESIGN.md §2.7).
    dy = xs;
    dxs = xs;
    daw = bwd.take(bytes({S, I, el}));
    d_gate_up = bwd.take(bytes({S, 2, I, el}));
    d_w_s = bwd.take(bytes({S, 4}));
    wgrad_split = bwd.take(wgrad_split_workspace_bytes(desc, rows));
    if (desc.has_bias) bias_partial = bwd.take(bias_grad_workspace_bytes(S, desc.num_experts, std::max(2 * I, H)));
    workspace_bytes = std::max(fwd.end, bwd.end);
}

ExpertsLayout::ExpertsLayout(const PlanDesc &desc, std::int64_t num_rows, bool gathered,
                             const char *rows_arg)
    : rows(num_rows) {
    MOEJIT_REQUIRE(num_rows >= 0 && num_rows <= std::numeric_limits<std::int32_t>::max(),
                   "{} is {}, expected 0 .. 2^31-1 (rows and offsets are int32)", rows_arg, num_rows);
    const std::int64_t R = rows, H = desc.hidden_size, I = desc.intermediate_size;
    const std::int64_t el = static_cast<std::int64_t>(dtype_size(desc.dtype));
    auto bytes = [rows_arg](std::initializer_list<std::int64_t> f) { return checked_bytes(f, rows_arg); };

    RegionAllocator saved{rows_arg};
    w_s = saved.take(bytes({R, 4}));
    gate_up = saved.take(bytes({R, 2, I, el}));
    saved_bytes = saved.end;
    saved_payload = saved.payload;
    saved_regions = saved.regions;

    RegionAllocator fwd{rows_arg}, bwd{rows_arg};
    offsets = fwd.take(bytes({static_cast<std::int64_t>(desc.num_experts) + 1, 4}));
    bwd = fwd;  // both calls read the bounded offsets from the same place
    if (gathered) row_token = fwd.take(bytes({R, 4}));
    aw = fwd.take(bytes({R, I, el}));
    daw = bwd.take(bytes({R, I, el}));
    d_gate_up = bwd.take(bytes({R, 2, I, el}));
    d_w_s = bwd.take(bytes({R, 4}));
    wgrad_split = bwd.take(wgrad_split_workspace_bytes(desc, R));
    if (desc.has_bias) bias_partial = bwd.take(bias_grad_workspace_bytes(R, desc.num_experts, std::max(2 * I, H)));
    workspace_bytes = std::max(fwd.end, bwd.end);
}

Region RegionAllocator::take(std::size_t bytes) {
    const std::size_t start = checked_add(end, kRegionAlignment - 1, arg) / kRegionAlignment * kRegionAlignment;
    Region r{start, bytes};
    end = checked_add(start, bytes, arg);
    payload += bytes;
    ++regions;
    return r;
}

SizeTerms saved_size_terms(const PlanDesc &desc) {
    if (desc.recipe == Recipe::fp8_block) return size_terms(Fp8Layout(desc, 0), Fp8Layout(desc, 1));
    // Gathered plans keep row_token too: the bound covers every plan of `desc`.
    return size_terms(PlanLayout(desc, 0, true), PlanLayout(desc, 1, true));
}

SizeTerms experts_saved_size_terms(const PlanDesc &desc) {
    return size_terms(ExpertsLayout(desc, 0, true), ExpertsLayout(desc, 1, true));
}

}  // namespace moejit
