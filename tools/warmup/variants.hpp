// Every plan descriptor a model spec can be used with (dtype, fc1 layout, weight-gradient dtype
// and accumulation, index dtype, routing-weight dtype, tokens hint), grouped into waves.
//
// Why waves: one context compiles serially, so the tool runs descriptors in parallel, one
// compile-only context per worker, all sharing the disk cache. Two workers that need the same
// kernel at the same time would both compile it. A kernel depends on a subset of the
// descriptor's fields, so it is first needed by the variant that differs from the base
// descriptor in exactly those fields. Running variants in order of how many fields differ from
// the base (wave 0 = the base of each spec and dtype, wave 1 = one field changed, ...) with a
// barrier between waves means each kernel is compiled once, and later waves mostly hit the cache.
// The exception: the specs and dtypes run side by side, so a kernel that does not depend on them
// (routing index, routing-weight scatter) may be compiled by two workers of one wave.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moejit.h"
#include "warmup/model_spec.hpp"

namespace warmup {

struct WarmupJob {
    std::string label;        // "qwen3-30b-a3b bf16 merged wgrad=fp32+acc index=int32 routing=fp32"
    moejit_plan_desc_t desc;  // complete, ready for moejit_plan_warmup
    int wave = 0;
};

struct VariantOptions {
    std::vector<moejit_dtype_t> dtypes{MOEJIT_DTYPE_BF16, MOEJIT_DTYPE_FP16};
    std::vector<std::int64_t> tokens_hints{0};
    moejit_recipe_t recipe = MOEJIT_RECIPE_BF16;  // --recipe (every job's)
};

// `defaults` comes from moejit_plan_desc_init (struct_size and fields this tool does not vary).
// Jobs are sorted by wave (stable: spec order, then dtype order within a wave).
std::vector<WarmupJob> enumerate_jobs(const std::vector<ModelSpec> &specs, const VariantOptions &options,
                                      const moejit_plan_desc_t &defaults);

}  // namespace warmup
