// The checks a plan's calls make on the caller's arguments, shared by both recipes (moe/plan.cpp,
// moe/plan_fp8.cpp): each failure is Status::invalid_argument naming the C field (args->...) and
// what was expected.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe/plan.hpp"
#include "moe/plan_desc.hpp"

namespace moejit {

// A tensor the call needs (when `needed`): not NULL and 16-byte aligned (rows move as 16-byte
// vectors).
void require_tensor(const void *p, const char *name, bool needed);

// args->consume_saved, 0 or 1 (a 0.11 caller's reserved field there, which had to be 0): true
// for 1.
bool consumes_saved(std::int32_t consume_saved);

// The layer calls' saved and workspace buffers against what moejit_plan_saved_size and
// `workspace_query` (moejit_plan_workspace_size; moejit_plan_cached_workspace_size for an FP8
// call with a weight cache; moejit_plan_consuming_workspace_size for a consuming bf16 backward)
// return for the layout's T (PlanLayout or Fp8Layout).
void require_layer_buffers(std::int64_t tokens, std::size_t saved_bytes, std::size_t workspace_bytes,
                           const char *workspace_query, const void *saved, std::size_t saved_size,
                           const void *workspace, std::size_t workspace_size);
template <class Layout, class Args> void require_layer_buffers(const Layout &L, const Args &a, bool cached = false) {
    std::size_t workspace_bytes = L.workspace_bytes;
    const char *query = "moejit_plan_workspace_size";
    if constexpr (requires { L.cached_workspace_bytes; })
        if (cached) workspace_bytes = L.cached_workspace_bytes, query = "moejit_plan_cached_workspace_size";
    if constexpr (requires { L.consumes_saved; })
        if (L.consumes_saved) query = "moejit_plan_consuming_workspace_size";
    require_layer_buffers(L.tokens, L.saved_bytes, workspace_bytes, query, a.saved, a.saved_size, a.workspace,
                          a.workspace_size);
}

// Which weights a call reads and writes gradients of: both (forward, backward), or one side
// (a backward part: DOWN fc2's, UP fc1's).
enum class WeightHalf { both, fc1, fc2 };

// The weights every call reads (b_down only with biases and `bias_needed`; b_gate_up is the
// forward's own check), and the gradients every backward writes.
void require_weights(const PlanDesc &desc, const ExpertWeights &w, bool bias_needed,
                     WeightHalf half = WeightHalf::both);
void require_grads(const PlanDesc &desc, const ExpertGrads &g, WeightHalf half = WeightHalf::both);

}  // namespace moejit
