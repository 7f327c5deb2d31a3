// The SwiGLU op's arguments for a plan's calls (both recipes): the descriptor's activation over
// the saved g and u (`gate_up`: g then u [S,I] each, or merged [S,2I]); the op takes exactly one
// layout's pointers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe/plan_desc.hpp"
#include "ops/swiglu.hpp"

namespace moejit {

// g's or d_gate's [S,I] bytes: where u or d_up starts in the split layout's gate_up.
std::size_t split_half_bytes(const PlanDesc &desc, std::int64_t rows);

// aw = a·w_s from gate_up (the forward); the caller adds fc1's bias, if any.
SwigluForwardArgs plan_swiglu_forward_args(const PlanDesc &desc, std::int64_t rows, const char *gate_up,
                                           const float *w_s, void *aw, void *stream);
// d_gate_up (laid out like gate_up) and d_w_s from d(a·w) in `daw`, which then holds a·w
// recomputed (fc2's weight gradient reads it; the forward keeps no a·w).
SwigluBackwardArgs plan_swiglu_backward_args(const PlanDesc &desc, std::int64_t rows, const char *gate_up,
                                             const float *w_s, void *daw, char *d_gate_up, float *d_w_s,
                                             void *stream);

}  // namespace moejit
