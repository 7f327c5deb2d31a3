#include "warmup/variants.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "moejit/moejit.hpp"  // dtype_name

namespace warmup {

using moejit::api::dtype_name;

std::vector<WarmupJob> enumerate_jobs(const std::vector<ModelSpec> &specs, const VariantOptions &options,
                                      const moejit_plan_desc_t &defaults) {
    // Each varied field, value 0 being the base. Accumulation is its own field (it needs fp32
    // weight gradients), so a kernel that only cares about the fp32 gradient dtype is first
    // needed in wave 1 and the accumulating variant (wave 2) finds it in the cache.
    enum { hint, fc1, wgrad_fp32, accumulate, index, routing, fields };
    const std::array<int, fields> extent{static_cast<int>(options.tokens_hints.size()), 2, 2, 2, 2, 2};
    // Index dtype int64 first: it is what torch.topk returns, the common case.
    constexpr moejit_dtype_t index_dtypes[] = {MOEJIT_DTYPE_INT64, MOEJIT_DTYPE_INT32};

    std::vector<WarmupJob> jobs;
    for (const ModelSpec &spec : specs) {
        for (moejit_dtype_t dtype : options.dtypes) {
            std::array<int, fields> at{};
            while (true) {
                if (!(at[accumulate] && !at[wgrad_fp32])) {  // accumulation needs fp32 gradients
                    WarmupJob job;
                    moejit_plan_desc_t &d = job.desc;
                    d = defaults;
                    d.dtype = dtype;
                    d.hidden_size = spec.hidden, d.intermediate_size = spec.intermediate;
                    d.num_experts = spec.experts, d.top_k = spec.top_k;
                    d.swiglu_limit = spec.swiglu_limit;
                    d.activation = MOEJIT_ACTIVATION_SWIGLU;
                    d.fc1_layout = at[fc1] ? MOEJIT_FC1_MERGED : MOEJIT_FC1_SPLIT;
                    const char *layout = at[fc1] ? "merged" : "split";
                    if (spec.gpt_oss) {
                        // As transformers stores gpt-oss ([E,H,2I], x·W), then as [E,2I,H].
                        d.activation = MOEJIT_ACTIVATION_GPT_OSS;
                        d.fc1_layout = MOEJIT_FC1_INTERLEAVED;
                        d.has_bias = 1;
                        d.weights_transposed = at[fc1] ? 0 : 1;
                        layout = at[fc1] ? "gpt-oss [E,2I,H]" : "gpt-oss [E,H,2I]";
                    }
                    d.weight_grad_dtype = at[wgrad_fp32] ? MOEJIT_DTYPE_FP32 : dtype;
                    d.weight_grad_accumulate = at[accumulate];
                    d.index_dtype = index_dtypes[at[index]];
                    d.routing_dtype = at[routing] ? MOEJIT_DTYPE_FP32 : dtype;
                    d.tokens_hint = options.tokens_hints[static_cast<std::size_t>(at[hint])];
                    d.recipe = options.recipe;
                    job.wave = static_cast<int>(std::count_if(at.begin(), at.end(), [](int v) { return v != 0; }));
                    job.label = fmt::format("{} {} {} wgrad={}{} index={} routing={}", spec.name, dtype_name(dtype),
                                            layout, dtype_name(d.weight_grad_dtype),
                                            d.weight_grad_accumulate ? "+acc" : "", dtype_name(d.index_dtype),
                                            dtype_name(d.routing_dtype));
                    if (options.tokens_hints.size() > 1 || d.tokens_hint != 0)
                        job.label += fmt::format(" tokens_hint={}", d.tokens_hint);
                    if (d.recipe == MOEJIT_RECIPE_FP8_BLOCK) job.label += " recipe=fp8-block";
                    jobs.push_back(std::move(job));
                }
                // Next point of the mixed-radix counter.
                int f = 0;
                while (f < fields && ++at[f] == extent[f]) at[f++] = 0;
                if (f == fields) break;
            }
        }
    }
    std::stable_sort(jobs.begin(), jobs.end(), [](const WarmupJob &a, const WarmupJob &b) { return a.wave < b.wave; });
    return jobs;
}

}  // namespace warmup
