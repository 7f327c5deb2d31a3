// What a plan resolved, as moejit_plan_describe's text (capi/moejit.h, "configuration"): the
// context's configuration (runtime/config.hpp) as the layer applies it, and each grouped GEMM's tile.
#pragma once

#include <string>

#include "runtime/config.hpp"
#include "moe/layer_gemms.hpp"
#include "moe/plan_desc.hpp"

namespace moejit {

// One "key=value\n" line per item, in the order moejit.h documents. `specs` are the layer's
// (layer_specs(desc, config, cc)), so gather and fuse_swiglu read what the plan does.
std::string describe_plan(const Config &config, const std::string &arch, const PlanDesc &desc,
                          const LayerSpecs &specs);

}  // namespace moejit
