#include "moe/plan_layout.hpp"

#include "core/dtype.hpp"
#include "moe/layer_gemms.hpp"
#include "ops/routing.hpp"

namespace moejit {
namespace {

struct Allocator {
    std::size_t end = 0;
    Region take(std::size_t bytes) {
        Region r{(end + kRegionAlignment - 1) / kRegionAlignment * kRegionAlignment, bytes};
        end = r.offset + bytes;
        return r;
    }
};

}  // namespace

PlanLayout::PlanLayout(const moejit_plan_desc_t &desc, std::int64_t num_tokens, bool gathered_rows)
    : tokens(num_tokens), rows(num_tokens * desc.top_k), gathered(gathered_rows) {
    const std::size_t S = static_cast<std::size_t>(rows);
    const std::size_t H = static_cast<std::size_t>(desc.hidden_size);
    const std::size_t I = static_cast<std::size_t>(desc.intermediate_size);
    const std::size_t E = static_cast<std::size_t>(desc.num_experts);
    const std::size_t el = dtype_size(desc.dtype);

    Allocator saved;
    offsets = saved.take((E + 1) * 4);
    scatter_index = saved.take(S * 4);
    if (gathered) row_token = saved.take(S * 4);
    w_s = saved.take(S * 4);
    gate_up = saved.take(S * 2 * I * el);
    aw = saved.take(S * I * el);
    saved_bytes = saved.end;

    Allocator fwd, bwd;
    xs = bwd.take(S * H * el);
    if (!gathered) fwd = bwd;  // forward scatters x to the same place
    counts = fwd.take(E * 4);
    routing = fwd.take(routing_index_workspace_size(num_tokens, desc.top_k, desc.num_experts));
    y = fwd.take(S * H * el);

    dy = bwd.take(S * H * el);
    daw = bwd.take(S * I * el);
    d_gate_up = bwd.take(S * 2 * I * el);
    d_w_s = bwd.take(S * 4);
    dxs = bwd.take(S * H * el);
    wgrad_split = bwd.take(wgrad_split_workspace_bytes(desc, rows));
    workspace_bytes = std::max(fwd.end, bwd.end);
}

}  // namespace moejit
