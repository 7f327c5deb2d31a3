// The C boundary's translations: each C struct of moejit.h becomes the library's own type here,
// in exactly one function, and the library's results become C values. The C enums and the
// library's enums have the same values (capi_convert.cpp asserts every one), so an enum converts
// by value: a caller's out-of-range value reaches the library's validation unchanged, which
// rejects it naming the C field. Nothing under src/ includes moejit.h (docs/DESIGN.md §1.3).
#pragma once

#include "capi_handles.hpp"
#include "runtime/context.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"
#include "base/logger.hpp"
#include "runtime/jit_engine.hpp"
#include "moe/plan.hpp"
#include "moe/plan_desc.hpp"
#include "moejit.h"
#include "gemm/group_gemm.hpp"
#include "ops/swiglu.hpp"

namespace moejit {

constexpr DType to_internal(moejit_dtype_t dtype) { return static_cast<DType>(dtype); }
constexpr BackwardPart to_internal(moejit_backward_part_t part) { return static_cast<BackwardPart>(part); }
constexpr moejit_status_t to_c(Status status) { return static_cast<moejit_status_t>(status); }
constexpr moejit_log_level_t to_c(LogLevel level) { return static_cast<moejit_log_level_t>(level); }

// Context options: the C callback goes into `log_sink`, and the returned options log through it.
ContextOptions to_internal(const moejit_context_options_t &options, CLogSink &log_sink);
PlanDesc to_internal(const moejit_plan_desc_t &desc);
ForwardArgs to_internal(const moejit_forward_args_t &args);
BackwardArgs to_internal(const moejit_backward_args_t &args);
ExpertsForwardArgs to_internal(const moejit_experts_forward_args_t &args);
ExpertsBackwardArgs to_internal(const moejit_experts_backward_args_t &args);
GroupGemmNkArgs to_internal(const moejit_group_gemm_nk_args_t &args);
GroupGemmMnArgs to_internal(const moejit_group_gemm_mn_args_t &args);
// moejit_swiglu_args_t serves both directions: Args is SwigluForwardArgs or SwigluBackwardArgs.
template <class Args> Args to_internal_swiglu(const moejit_swiglu_args_t &args);

// The JIT engine's counters as moejit_context_cache_stats reports them (struct_size not set).
moejit_cache_stats_t to_c(const CacheCounters &counters);

}  // namespace moejit
