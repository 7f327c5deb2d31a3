// C entry points of the MoE layer plan.
#include <cstring>

#include "capi_guard.hpp"
#include "moejit.h"

using namespace moejit;

struct moejit_plan_s {};

extern "C" {

MOEJIT_API void moejit_plan_destroy(moejit_plan_t plan) { delete plan; }

}  // extern "C"
