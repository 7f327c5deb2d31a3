// Where a plan keeps its tensors: the caller's `saved` buffer (forward → backward) and
// `workspace` (scratch for one call). Pure arithmetic on the descriptor and T, so the size
// queries need no device.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe/plan_desc.hpp"

namespace moejit {

// Every region starts on a 256-byte boundary (16-byte vector loads need 16; 256 keeps rows of
// the grouped GEMMs' operands aligned for TMA later).
inline constexpr std::size_t kRegionAlignment = 256;

struct Region {
    std::size_t offset = 0;
    std::size_t bytes = 0;
    template <class T> T *in(void *base) const {
        return reinterpret_cast<T *>(static_cast<char *>(base) + offset);
    }
    template <class T> const T *in(const void *base) const {
        return reinterpret_cast<const T *>(static_cast<const char *>(base) + offset);
    }
};

// Regions taken one after another from offset 0, each aligned; sizes are checked sums (an
// overflow is Status::invalid_argument blamed on `arg`).
struct RegionAllocator {
    const char *arg;
    std::size_t end = 0;
    std::size_t payload = 0;  // the regions' bytes without their alignment padding
    std::size_t regions = 0;
    Region take(std::size_t bytes);
    // A region from `at` (aligned up) over bytes taken before, for one whose life meets none of
    // theirs (Fp8Layout); `end` grows if it reaches further. Not counted in payload or regions.
    Region take_over(std::size_t at, std::size_t bytes);
};

// Neither x's nor dout's [S,H] scatter is saved: backward re-scatters x (args->x) and dout into
// its workspace. gathered: fc1 reads x's rows by row_token (layer_specs(...).gathered), so
// forward's workspace has no xs; otherwise forward scatters x to the same place (offset 0).
struct PlanLayout {
    // Validates T as every call taking it does (T >= 0, T·k <= 2^31-1) and computes every size
    // with checked arithmetic: a bad or overflowing T is Status::invalid_argument naming
    // `tokens_arg` ("num_tokens" for the size queries, "args->num_tokens" for the calls).
    // consume_saved: the layout of a backward that writes its SwiGLU gradient over the saved g
    // and u (moejit_backward_args_t.consume_saved): no d_gate_up region in the workspace.
    PlanLayout(const PlanDesc &desc, std::int64_t num_tokens, bool gathered,
               const char *tokens_arg = "num_tokens", bool consume_saved = false);

    std::int64_t tokens = 0, rows = 0;  // T and S = T·k
    bool gathered = false;
    bool consumes_saved = false;  // d_gate_up is gate_up, in the saved buffer
    bool w_s_saved = true;        // !desc.routing_weights_in_backward: w_s is in saved
    // saved (written by forward, read by backward)
    Region offsets;        // [E+1] int32
    Region scatter_index;  // [T,k] int32
    Region gate_up;        // split: g [S,I] then u [S,I]; merged: [S,2I]
    std::size_t saved_bytes = 0;
    std::size_t saved_payload = 0, saved_regions = 0;  // saved's bytes without padding; its region count
    // workspace of backward, and of forward when not gathered
    Region xs;             // [S,H] scattered x (backward: dy's rows, then x's, then dxs)
    // forward workspace
    Region counts;         // [E] int32
    Region routing;        // the routing index's scratch
    Region w_s;            // [S] fp32 routing weight per scattered row: in saved after
                           // scatter_index when w_s_saved, else here (the forward's workspace)
    Region row_token;      // [S] int32 when gathered: the token each scattered row comes from
    Region y;              // [S,H] fc2 output (= xs when x is scattered: fc1 has read it by then)
    Region aw;             // [S,I] a·w_s, fc2's input (the backward recomputes it into daw)
    // backward workspace (overlaps forward's: a call uses one or the other)
    Region dy;             // [S,H] scattered dout: = xs, read before backward scatters x
    Region w_s_backward;   // [S] fp32, !w_s_saved: w_s scattered again from routing_weights
    Region daw;            // [S,I] d(a·w), then a·w recomputed in place (fc2's weight gradient)
    Region d_gate_up;      // like gate_up (empty when consumes_saved: gate_up's bytes instead)
    Region d_w_s;          // [S] fp32
    Region dxs;            // [S,H]: = xs, written after the last read of x's rows
    Region wgrad_split;    // the weight gradients' split-reduction scratch (may be empty)
    Region bias_partial;   // has_bias: the bias gradients' partial sums (ops/expert_bias.hpp)
    std::size_t workspace_bytes = 0;
    // consumes_saved only: the workspaces of the backward's two parts (moejit_plan_backward_part):
    // DOWN's regions are dy, w_s_backward, daw, d_w_s, bias_partial and the first
    // down_split_bytes of wgrad_split (fc2's split alone); UP's are xs (x's rows, then dxs) and
    // up_bias_partial (has_bias: db_gate_up's partial sums).
    std::size_t down_workspace_bytes = 0, up_workspace_bytes = 0, down_split_bytes = 0;
    Region up_bias_partial;
};

// The pre-dispatched experts entry's buffers for R rows already grouped by expert (the caller
// owns xs, offsets, the row weights, ys and their gradients): the layer's per-row tensors
// without the routing index, the scatters and the gather.
struct ExpertsLayout {
    // Validates R (0 <= R <= 2^31-1, offsets are int32) and every size, blamed on `rows_arg`.
    ExpertsLayout(const PlanDesc &desc, std::int64_t num_rows, bool gathered,
                  const char *rows_arg = "num_rows");

    std::int64_t rows = 0;  // R
    // saved
    Region w_s;        // [R] fp32: the row weights (1 without)
    Region gate_up;    // as PlanLayout's
    std::size_t saved_bytes = 0;
    std::size_t saved_payload = 0, saved_regions = 0;
    // workspace of both calls: the caller's offsets as bounded on the device (check_offsets)
    Region offsets;    // [E+1] int32
    // forward workspace
    Region row_token;  // [R] int32 identity, when fc1 gathers
    Region aw;         // [R,I], as PlanLayout's
    // backward workspace
    Region daw, d_gate_up;
    Region d_w_s;      // [R] fp32, when the caller wants no row-weight gradient
    Region wgrad_split, bias_partial;
    std::size_t workspace_bytes = 0;
};

// An affine bound of the saved buffer's size, for callers that size it symbolically (a
// framework's fake tensors): saved_bytes(n) <= per_unit·n + constant for every valid n, n = T
// for the layer (PlanLayout), R for the experts entry (ExpertsLayout), any plan of `desc`
// (gathered or not). moejit_saved_size_terms / moejit_experts_saved_size_terms.
struct SizeTerms {
    std::int64_t per_unit = 0;
    std::int64_t constant = 0;
};
SizeTerms saved_size_terms(const PlanDesc &desc);          // desc validated by the caller
SizeTerms experts_saved_size_terms(const PlanDesc &desc);

}  // namespace moejit
