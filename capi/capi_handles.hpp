// What the C handles are: moejit_context_t and moejit_plan_t point to these. They belong to the
// C boundary; the library's own objects (Context, Plan) know nothing of them.
#pragma once

#include <memory>

#include "runtime/context.hpp"
#include "moejit.h"

namespace moejit {

class Plan;

// The caller's log callback, held by its context handle for as long as the context lives: the
// context's Logger reaches it through a function of the library's LogFn type, which passes the
// level as the C enum (capi_convert.cpp).
struct CLogSink {
    moejit_log_fn fn = nullptr;
    void *user_data = nullptr;
};

}  // namespace moejit

struct moejit_context_s {
    moejit::CLogSink log;  // declared first: it outlives impl, which logs through it
    moejit::Context impl;
    explicit moejit_context_s(const moejit_context_options_t &options);  // capi_core.cpp
};

// A Plan, or a subclass of it: the regression suite wraps one that reproduces a historical bug
// (tests/support/stale_bound_plan.hpp) to prove, through the C API, that its checks catch it.
struct moejit_plan_s {
    std::unique_ptr<moejit::Plan> impl;
    explicit moejit_plan_s(std::unique_ptr<moejit::Plan> plan);  // capi_plan.cpp
    ~moejit_plan_s();
};
