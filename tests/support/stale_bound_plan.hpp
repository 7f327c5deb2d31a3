// The historical launch-bound bug, on purpose (docs/DESIGN.md §3.6): a Plan whose backward
// grouped GEMMs are bounded by T instead of S, so that with duplicate routes the rows past T are
// never written. The regression suite runs it through the C API, as any plan, and requires its
// checks to fail: a check that cannot fail proves nothing.
#pragma once

#include <cstdint>
#include <memory>

#include "capi_convert.hpp"
#include "capi_handles.hpp"
#include "moe/plan.hpp"
#include "moe/plan_layout.hpp"
#include "moejit.h"

namespace moejit::test {

class StaleBoundPlan final : public Plan {
public:
    using Plan::Plan;

protected:
    std::int64_t backward_gemm_bound(const PlanLayout &, std::int64_t num_tokens) const override {
        return num_tokens;
    }
};

// A moejit_plan_t that runs a StaleBoundPlan of `desc` on `context` (moejit_plan_destroy it).
// Throws moejit::Error where moejit_plan_create would fail.
inline moejit_plan_t create_stale_bound_plan(moejit_context_t context, const moejit_plan_desc_t &desc) {
    return new moejit_plan_s(std::make_unique<StaleBoundPlan>(context->impl, to_internal(desc)));
}

}  // namespace moejit::test
