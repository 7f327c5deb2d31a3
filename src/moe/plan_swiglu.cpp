#include "moe/plan_swiglu.hpp"

#include <cstddef>

#include "base/dtype.hpp"

namespace moejit {

std::size_t split_half_bytes(const PlanDesc &d, std::int64_t rows) {
    return static_cast<std::size_t>(rows * d.intermediate_size) * dtype_size(d.dtype);
}

namespace {

constexpr float kGptOssAlpha = 1.702f;  // desc->activation_alpha 0

// The fields both directions take.
template <class Args> Args swiglu_args(const PlanDesc &d, std::int64_t rows, const char *gate_up, const float *w_s,
                                       void *stream) {
    const bool merged = fc1_merged(d);
    Args act;
    act.dtype = d.dtype;
    act.rows = rows;
    act.intermediate = d.intermediate_size;
    act.merged = merged;
    act.limit = d.swiglu_limit;
    act.gate = merged ? nullptr : gate_up;
    act.up = merged ? nullptr : gate_up + split_half_bytes(d, rows);
    act.gate_up = merged ? gate_up : nullptr;
    act.w_s = w_s;
    act.stream = stream;
    act.interleaved = d.fc1_layout == Fc1Layout::interleaved;
    act.activation = d.activation;
    act.alpha = d.activation_alpha > 0.0f ? d.activation_alpha : kGptOssAlpha;
    return act;
}

}  // namespace

SwigluForwardArgs plan_swiglu_forward_args(const PlanDesc &d, std::int64_t rows, const char *gate_up,
                                           const float *w_s, void *aw, void *stream) {
    SwigluForwardArgs act = swiglu_args<SwigluForwardArgs>(d, rows, gate_up, w_s, stream);
    act.aw = aw;
    return act;
}

SwigluBackwardArgs plan_swiglu_backward_args(const PlanDesc &d, std::int64_t rows, const char *gate_up,
                                             const float *w_s, void *daw, char *d_gate_up, float *d_w_s,
                                             void *stream) {
    const bool merged = fc1_merged(d);
    SwigluBackwardArgs act = swiglu_args<SwigluBackwardArgs>(d, rows, gate_up, w_s, stream);
    act.daw = daw;
    act.aw = daw;
    act.d_gate = merged ? nullptr : d_gate_up;
    act.d_up = merged ? nullptr : d_gate_up + split_half_bytes(d, rows);
    act.d_gate_up = merged ? d_gate_up : nullptr;
    act.d_w_s = d_w_s;
    return act;
}

}  // namespace moejit
