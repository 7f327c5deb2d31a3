#include "moe/plan_checks.hpp"

#include "base/error.hpp"

namespace moejit {

void require_tensor(const void *p, const char *name, bool needed) {
    if (!needed) return;
    MOEJIT_REQUIRE(p != nullptr, "{} is NULL", name);
    MOEJIT_REQUIRE(reinterpret_cast<std::uintptr_t>(p) % 16 == 0,
                   "{} ({}) is not 16-byte aligned; moejit moves rows as 16-byte vectors", name, p);
}

bool consumes_saved(std::int32_t consume_saved) {
    MOEJIT_REQUIRE(consume_saved == 0 || consume_saved == 1, "args->consume_saved is {}, expected 0 or 1",
                   consume_saved);
    return consume_saved == 1;
}

void require_layer_buffers(std::int64_t tokens, std::size_t saved_bytes, std::size_t workspace_bytes,
                           const char *workspace_query, const void *saved, std::size_t saved_size,
                           const void *workspace, std::size_t workspace_size) {
    require_tensor(saved, "args->saved", true);
    require_tensor(workspace, "args->workspace", workspace_bytes > 0);
    MOEJIT_REQUIRE(saved_size >= saved_bytes, "args->saved_size is {}, expected >= {} (moejit_plan_saved_size for T={})",
                   saved_size, saved_bytes, tokens);
    MOEJIT_REQUIRE(workspace_size >= workspace_bytes, "args->workspace_size is {}, expected >= {} ({} for T={})",
                   workspace_size, workspace_bytes, workspace_query, tokens);
}

void require_weights(const PlanDesc &d, const ExpertWeights &w, bool bias_needed, WeightHalf half) {
    const bool fc1 = half != WeightHalf::fc2, fc2 = half != WeightHalf::fc1;
    require_tensor(w.w_gate, "args->w_gate", fc1 && !fc1_merged(d));
    require_tensor(w.w_up, "args->w_up", fc1 && !fc1_merged(d));
    require_tensor(w.w_gate_up, "args->w_gate_up", fc1 && fc1_merged(d));
    require_tensor(w.w_down, "args->w_down", fc2);
    require_tensor(w.b_down, "args->b_down", fc2 && d.has_bias != 0 && bias_needed);
}

void require_grads(const PlanDesc &d, const ExpertGrads &g, WeightHalf half) {
    const bool fc1 = half != WeightHalf::fc2, fc2 = half != WeightHalf::fc1;
    require_tensor(g.dw_gate, "args->dw_gate", fc1 && !fc1_merged(d));
    require_tensor(g.dw_up, "args->dw_up", fc1 && !fc1_merged(d));
    require_tensor(g.dw_gate_up, "args->dw_gate_up", fc1 && fc1_merged(d));
    require_tensor(g.dw_down, "args->dw_down", fc2);
    require_tensor(g.db_gate_up, "args->db_gate_up", fc1 && d.has_bias != 0);
    require_tensor(g.db_down, "args->db_down", fc2 && d.has_bias != 0);
}

}  // namespace moejit
