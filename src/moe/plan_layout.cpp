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

// The saved buffer's tail both layouts share, gate_up [rows, 2I], then its totals.
template <class Layout, class Bytes>
void take_saved_tail(Layout &l, RegionAllocator &saved, const Bytes &bytes, std::int64_t rows, std::int64_t I,
                     std::int64_t el) {
    l.gate_up = saved.take(bytes({rows, 2, I, el}));
    l.saved_bytes = saved.end;
    l.saved_payload = saved.payload;
    l.saved_regions = saved.regions;
}

// The backward's regions both layouts share (daw, d_gate_up, d_w_s, the weight-gradient split and
// the bias partials), then the workspace's size: the larger of the two calls'.
// d_gate_up_in_saved: the backward writes it over the saved gate_up (no region here).
template <class Layout, class Bytes>
void take_backward_tail(Layout &l, const RegionAllocator &fwd, RegionAllocator &bwd, const Bytes &bytes,
                        const PlanDesc &desc, std::int64_t rows, bool d_gate_up_in_saved = false) {
    const std::int64_t H = desc.hidden_size, I = desc.intermediate_size;
    const std::int64_t el = static_cast<std::int64_t>(dtype_size(desc.dtype));
    l.daw = bwd.take(bytes({rows, I, el}));
    if (!d_gate_up_in_saved) l.d_gate_up = bwd.take(bytes({rows, 2, I, el}));
    l.d_w_s = bwd.take(bytes({rows, 4}));
    if (desc.has_bias) l.bias_partial = bwd.take(bias_grad_workspace_bytes(rows, desc.num_experts, std::max(2 * I, H)));
    // Last, so that a prefix of it (fc2's split alone) ends the backward's DOWN part.
    l.wgrad_split = bwd.take(wgrad_split_workspace_bytes(desc, rows));
    l.workspace_bytes = std::max(fwd.end, bwd.end);
}

}  // namespace

PlanLayout::PlanLayout(const PlanDesc &desc, std::int64_t num_tokens, bool gathered_rows,
                       const char *tokens_arg, bool consume_saved)
    : tokens(num_tokens),
      rows(checked_rows(num_tokens, desc.top_k, tokens_arg)),
      gathered(gathered_rows),
      consumes_saved(consume_saved),
      w_s_saved(desc.routing_weights_in_backward == 0) {
    // S <= 2^31-1 now; H, I and E come from a validated desc but have no upper bound, so every
    // byte count is still a checked product (blamed on T, the value that varies per call).
    const std::int64_t S = rows, H = desc.hidden_size, I = desc.intermediate_size, E = desc.num_experts;
    const std::int64_t el = static_cast<std::int64_t>(dtype_size(desc.dtype));
    const char *arg = tokens_arg;
    auto bytes = [arg](std::initializer_list<std::int64_t> f) { return checked_bytes(f, arg); };

    RegionAllocator saved{arg};
    offsets = saved.take(bytes({E + 1, 4}));
    scatter_index = saved.take(bytes({S, 4}));
    if (w_s_saved) w_s = saved.take(bytes({S, 4}));  // the 0.13 layout, byte for byte
    take_saved_tail(*this, saved, bytes, S, I, el);

    RegionAllocator fwd{arg}, bwd{arg};
    xs = bwd.take(bytes({S, H, el}));
    if (!gathered) fwd = bwd;  // forward scatters x to the same place
    counts = fwd.take(bytes({E, 4}));
    routing = fwd.take(routing_index_workspace_size(num_tokens, desc.top_k, desc.num_experts));
    // With desc.routing_weights_in_backward (0.14) the routing weights in scattered order are
    // not saved: the forward keeps them here, and the backward scatters them again from
    // args->routing_weights into its own region, after dy's (S·4 bytes fewer kept).
    if (!w_s_saved) {
        w_s = fwd.take(bytes({S, 4}));
        w_s_backward = bwd.take(bytes({S, 4}));
    }
    // Only the gathering fc1 reads row_token, and the backward scatters (it gathers nothing):
    // the forward's workspace, not saved (0.13).
    if (gathered) row_token = fwd.take(bytes({S, 4}));
    // a·w is not kept for the backward: its SwiGLU backward recomputes it from g and u into daw
    // (S·I elements fewer kept between the calls, DESIGN.md §2.7).
    aw = fwd.take(bytes({S, I, el}));
    // fc2 writes y after fc1 has read the last of x's scatter: over it when there is one (0.13).
    y = gathered ? fwd.take(bytes({S, H, el})) : xs;

    // Backward: one [S,H] region holds dy's rows (fc2's dgrad and weight gradient), then x's
    // rows (fc1's weight gradient), then dxs (fc1's dgrad, last): 2·S·H elements fewer than
    // three regions (DESIGN.md §2.7).
    dy = xs;
    dxs = xs;
    // A consuming backward writes d_gate_up over the saved g and u: the SwiGLU backward reads
    // each element before the same thread writes its gradient there (templates/swiglu.cuh), and
    // nothing reads g or u after it (S·2I elements fewer at the step's peak, DESIGN.md §2.7).
    take_backward_tail(*this, fwd, bwd, bytes, desc, S, consume_saved);

    // The backward in two parts (moejit_plan_backward_part, consuming only): DOWN uses the
    // consuming backward's regions (dy, w_s_backward, daw, d_w_s, the bias partials) and of the
    // split scratch fc2's part; UP only the [S,H] region (x's rows, then dxs) and its own bias partials. UP's
    // weight gradients split their reductions in the caller's dx, unwritten until UP's last
    // kernel (DESIGN.md §2.7).
    if (consume_saved) {
        down_split_bytes = wgrad_split_workspace_bytes(desc, S, true);
        down_workspace_bytes = wgrad_split.bytes ? wgrad_split.offset + down_split_bytes : bwd.end;
        RegionAllocator up{arg};
        up.take(bytes({S, H, el}));  // = xs
        if (desc.has_bias) up_bias_partial = up.take(bias_grad_workspace_bytes(S, E, 2 * I));
        up_workspace_bytes = up.end;
    }
}

ExpertsLayout::ExpertsLayout(const PlanDesc &desc, std::int64_t num_rows, bool gathered,
                             const char *rows_arg)
    : rows(num_rows) {
    MOEJIT_REQUIRE(num_rows >= 0 && num_rows <= std::numeric_limits<std::int32_t>::max(),
                   "{} is {}, expected 0 .. 2^31-1 (rows and offsets are int32)", rows_arg, num_rows);
    const std::int64_t R = rows, I = desc.intermediate_size;
    const std::int64_t el = static_cast<std::int64_t>(dtype_size(desc.dtype));
    auto bytes = [rows_arg](std::initializer_list<std::int64_t> f) { return checked_bytes(f, rows_arg); };

    RegionAllocator saved{rows_arg};
    w_s = saved.take(bytes({R, 4}));  // the caller's row weights: the backward has none of its own
    take_saved_tail(*this, saved, bytes, R, I, el);

    RegionAllocator fwd{rows_arg}, bwd{rows_arg};
    offsets = fwd.take(bytes({static_cast<std::int64_t>(desc.num_experts) + 1, 4}));
    bwd = fwd;  // both calls read the bounded offsets from the same place
    if (gathered) row_token = fwd.take(bytes({R, 4}));
    aw = fwd.take(bytes({R, I, el}));
    take_backward_tail(*this, fwd, bwd, bytes, desc, R);
}

Region RegionAllocator::take(std::size_t bytes) {
    const Region r = take_over(end, bytes);
    payload += bytes;
    ++regions;
    return r;
}

Region RegionAllocator::take_over(std::size_t at, std::size_t bytes) {
    const std::size_t start = checked_add(at, kRegionAlignment - 1, arg) / kRegionAlignment * kRegionAlignment;
    end = std::max(end, checked_add(start, bytes, arg));
    return Region{start, bytes};
}

SizeTerms saved_size_terms(const PlanDesc &desc) {
    if (desc.recipe == Recipe::fp8_block) return size_terms(Fp8Layout(desc, 0), Fp8Layout(desc, 1));
    // Gathered or not, the same saved layout (row_token is the forward's workspace since 0.13).
    return size_terms(PlanLayout(desc, 0, true), PlanLayout(desc, 1, true));
}

SizeTerms experts_saved_size_terms(const PlanDesc &desc) {
    return size_terms(ExpertsLayout(desc, 0, true), ExpertsLayout(desc, 1, true));
}

}  // namespace moejit
