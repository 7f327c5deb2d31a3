#include "capi_convert.hpp"

#include <string_view>
#include <type_traits>

#include "moejit/moejit.hpp"  // api::dtype_name, checked against the library's table below

namespace moejit {
namespace {

// ---------------------------------------------------------------- the enums: same values

#define MOEJIT_SAME_VALUE(c_value, internal)                                                  \
    static_assert(static_cast<long long>(c_value) == static_cast<long long>(internal),       \
                  #c_value " and " #internal " must have the same value (the C boundary converts " \
                  "enums by value)")

// Every C enum is an int (MOEJIT_ENUM); the library's have the same size, so a value passes
// through unchanged.
static_assert(sizeof(moejit_status_t) == sizeof(Status) && sizeof(moejit_dtype_t) == sizeof(DType) &&
              sizeof(moejit_log_level_t) == sizeof(LogLevel) && sizeof(moejit_fc1_layout_t) == sizeof(Fc1Layout) &&
              sizeof(moejit_activation_t) == sizeof(Activation) && sizeof(moejit_switch_t) == sizeof(Switch) &&
              sizeof(moejit_jit_mode_t) == sizeof(JitMode) && sizeof(moejit_recipe_t) == sizeof(Recipe) &&
              sizeof(moejit_backward_part_t) == sizeof(BackwardPart));

MOEJIT_SAME_VALUE(MOEJIT_SUCCESS, Status::success);
MOEJIT_SAME_VALUE(MOEJIT_ERROR_INVALID_ARGUMENT, Status::invalid_argument);
MOEJIT_SAME_VALUE(MOEJIT_ERROR_UNSUPPORTED, Status::unsupported);
MOEJIT_SAME_VALUE(MOEJIT_ERROR_OUT_OF_MEMORY, Status::out_of_memory);
MOEJIT_SAME_VALUE(MOEJIT_ERROR_NO_DRIVER, Status::no_driver);
MOEJIT_SAME_VALUE(MOEJIT_ERROR_NO_DEVICE, Status::no_device);
MOEJIT_SAME_VALUE(MOEJIT_ERROR_CUDA, Status::cuda);
MOEJIT_SAME_VALUE(MOEJIT_ERROR_COMPILE, Status::compile);
MOEJIT_SAME_VALUE(MOEJIT_ERROR_JIT_DISABLED, Status::jit_disabled);
MOEJIT_SAME_VALUE(MOEJIT_ERROR_CACHE, Status::cache);
MOEJIT_SAME_VALUE(MOEJIT_ERROR_INTERNAL, Status::internal);

MOEJIT_SAME_VALUE(MOEJIT_BACKWARD_PART_DOWN, BackwardPart::down);
MOEJIT_SAME_VALUE(MOEJIT_BACKWARD_PART_UP, BackwardPart::up);

MOEJIT_SAME_VALUE(MOEJIT_DTYPE_BF16, DType::bf16);
MOEJIT_SAME_VALUE(MOEJIT_DTYPE_FP16, DType::fp16);
MOEJIT_SAME_VALUE(MOEJIT_DTYPE_FP32, DType::fp32);
MOEJIT_SAME_VALUE(MOEJIT_DTYPE_INT32, DType::int32);
MOEJIT_SAME_VALUE(MOEJIT_DTYPE_INT64, DType::int64);

MOEJIT_SAME_VALUE(MOEJIT_LOG_DEBUG, LogLevel::debug);
MOEJIT_SAME_VALUE(MOEJIT_LOG_INFO, LogLevel::info);
MOEJIT_SAME_VALUE(MOEJIT_LOG_WARNING, LogLevel::warning);
MOEJIT_SAME_VALUE(MOEJIT_LOG_ERROR, LogLevel::error);

MOEJIT_SAME_VALUE(MOEJIT_JIT_FROM_ENV, JitMode::from_env);
MOEJIT_SAME_VALUE(MOEJIT_JIT_ON, JitMode::on);
MOEJIT_SAME_VALUE(MOEJIT_JIT_OFF, JitMode::off);
MOEJIT_SAME_VALUE(MOEJIT_SWITCH_FROM_ENV, Switch::from_env);
MOEJIT_SAME_VALUE(MOEJIT_SWITCH_ON, Switch::on);
MOEJIT_SAME_VALUE(MOEJIT_SWITCH_OFF, Switch::off);

MOEJIT_SAME_VALUE(MOEJIT_FC1_SPLIT, Fc1Layout::split);
MOEJIT_SAME_VALUE(MOEJIT_FC1_MERGED, Fc1Layout::merged);
MOEJIT_SAME_VALUE(MOEJIT_FC1_INTERLEAVED, Fc1Layout::interleaved);
MOEJIT_SAME_VALUE(MOEJIT_ACTIVATION_SWIGLU, Activation::swiglu);
MOEJIT_SAME_VALUE(MOEJIT_ACTIVATION_GPT_OSS, Activation::gpt_oss);
MOEJIT_SAME_VALUE(MOEJIT_RECIPE_BF16, Recipe::bf16);
MOEJIT_SAME_VALUE(MOEJIT_RECIPE_FP8_BLOCK, Recipe::fp8_block);

#undef MOEJIT_SAME_VALUE

// Kernel names and cache keys use the library's dtype names; tools print the C++ wrapper's.
constexpr bool same_dtype_name(moejit_dtype_t c) {
    return std::string_view(api::dtype_name(c)) == dtype_name(to_internal(c));
}
static_assert(same_dtype_name(MOEJIT_DTYPE_BF16) && same_dtype_name(MOEJIT_DTYPE_FP16) &&
                  same_dtype_name(MOEJIT_DTYPE_FP32) && same_dtype_name(MOEJIT_DTYPE_INT32) &&
                  same_dtype_name(MOEJIT_DTYPE_INT64) && same_dtype_name(static_cast<moejit_dtype_t>(0)),
              "moejit::api::dtype_name (include/moejit/moejit.hpp) and the library's dtype_name "
              "(src/base/dtype.hpp) must agree");

// The context's Logger calls this with the CLogSink its handle holds.
void forward_log(LogLevel level, const char *message, void *sink) {
    const auto *s = static_cast<const CLogSink *>(sink);
    s->fn(to_c(level), message, s->user_data);
}

}  // namespace

// ---------------------------------------------------------------- the structs, one function each

ContextOptions to_internal(const moejit_context_options_t &o, CLogSink &log_sink) {
    log_sink = CLogSink{o.log_fn, o.log_user_data};
    ContextOptions c;
    c.cache_dir = o.cache_dir;
    c.arch = o.arch;
    c.device_ordinal = o.device_ordinal;
    c.compile_only = o.compile_only != 0;
    if (o.log_fn) c.log = Logger{&forward_log, &log_sink};
    c.config.jit_mode = static_cast<JitMode>(o.jit_mode);
    c.config.tune = static_cast<Switch>(o.tune);
    c.config.gather = static_cast<Switch>(o.gather);
    c.config.fuse_swiglu = static_cast<Switch>(o.fuse_swiglu);
    c.config.gemm_tile = o.gemm_tile;
    return c;
}

PlanDesc to_internal(const moejit_plan_desc_t &d) {
    PlanDesc p;
    p.dtype = to_internal(d.dtype);
    p.hidden_size = d.hidden_size;
    p.intermediate_size = d.intermediate_size;
    p.num_experts = d.num_experts;
    p.top_k = d.top_k;
    p.fc1_layout = static_cast<Fc1Layout>(d.fc1_layout);
    p.activation = static_cast<Activation>(d.activation);
    p.swiglu_limit = d.swiglu_limit;
    p.weight_grad_dtype = to_internal(d.weight_grad_dtype);
    p.weight_grad_accumulate = d.weight_grad_accumulate;
    p.index_dtype = to_internal(d.index_dtype);
    p.routing_dtype = to_internal(d.routing_dtype);
    p.tokens_hint = d.tokens_hint;
    p.activation_alpha = d.activation_alpha;
    p.weights_transposed = d.weights_transposed;
    p.has_bias = d.has_bias;
    p.recipe = static_cast<Recipe>(d.recipe);  // reserved_0_5_tail is ignored
    p.routing_weights_in_backward = d.routing_weights_in_backward;
    return p;
}

namespace {

// The field groups several C structs share under the same names, copied by one piece each (a
// field missing from either side does not compile).

// The experts' parameters; only the forwards have b_gate_up (the backward does not read it).
template <class C> ExpertWeights weights_of(const C &a) {
    ExpertWeights w{a.w_gate, a.w_up, a.w_gate_up, a.w_down, nullptr, a.b_down};
    if constexpr (requires { a.b_gate_up; }) w.b_gate_up = a.b_gate_up;
    return w;
}
template <class C> ExpertGrads grads_of(const C &a) {
    return ExpertGrads{a.dw_gate, a.dw_up, a.dw_gate_up, a.dw_down, a.db_gate_up, a.db_down};
}

// The FP8 weight cache of a layer call (since 0.11); the backward's reserved field became
// consume_saved in 0.12.
template <class C> WeightCacheArgs weight_cache_of(const C &a) {
    WeightCacheArgs c{a.weight_cache, a.weight_cache_size, a.weight_cache_mode, 0};
    if constexpr (requires { a.reserved_0_11; }) c.reserved = a.reserved_0_11;
    return c;
}

// `to` with a plan call's caller-provided buffers and stream.
template <class Args, class C> Args with_call_buffers(Args to, const C &a) {
    to.saved = a.saved;
    to.saved_size = a.saved_size;
    to.workspace = a.workspace;
    to.workspace_size = a.workspace_size;
    to.stream = a.stream;
    return to;
}

// What both standalone grouped GEMMs take; the shape fields are each one's own.
template <class Args, class C> Args group_gemm_args(const C &a) {
    Args g;
    g.dtype = to_internal(a.dtype);
    g.c_dtype = to_internal(a.c_dtype);
    g.rows = a.rows;
    g.num_experts = a.num_experts;
    g.accumulate = a.accumulate;
    g.a = a.a;
    g.b = a.b;
    g.c = a.c;
    g.offsets = a.offsets;
    g.stream = a.stream;
    return g;
}

}  // namespace

// Designated initializers: each name is checked against the library's struct; the buffers and
// stream are filled in after.
ForwardArgs to_internal(const moejit_forward_args_t &a) {
    return with_call_buffers(ForwardArgs{.num_tokens = a.num_tokens, .x = a.x,
                                         .selected_experts = a.selected_experts,
                                         .routing_weights = a.routing_weights, .weights = weights_of(a),
                                         .out = a.out, .weight_cache = weight_cache_of(a)},
                             a);
}

BackwardArgs to_internal(const moejit_backward_args_t &a) {
    return with_call_buffers(BackwardArgs{.num_tokens = a.num_tokens, .dout = a.dout,
                                          .routing_weights = a.routing_weights, .weights = weights_of(a),
                                          .dx = a.dx, .d_routing_weights = a.d_routing_weights,
                                          .grads = grads_of(a), .x = a.x,
                                          .weight_cache = weight_cache_of(a), .consume_saved = a.consume_saved},
                             a);
}

ExpertsForwardArgs to_internal(const moejit_experts_forward_args_t &a) {
    return with_call_buffers(ExpertsForwardArgs{.num_rows = a.num_rows, .xs = a.xs,
                                                .expert_offsets = a.expert_offsets,
                                                .row_weights = a.row_weights, .weights = weights_of(a),
                                                .ys = a.ys},
                             a);
}

ExpertsBackwardArgs to_internal(const moejit_experts_backward_args_t &a) {
    return with_call_buffers(ExpertsBackwardArgs{.num_rows = a.num_rows, .xs = a.xs,
                                                 .expert_offsets = a.expert_offsets,
                                                 .row_weights = a.row_weights, .dys = a.dys,
                                                 .weights = weights_of(a), .dxs = a.dxs,
                                                 .d_row_weights = a.d_row_weights, .grads = grads_of(a)},
                             a);
}

GroupGemmNkArgs to_internal(const moejit_group_gemm_nk_args_t &a) {
    GroupGemmNkArgs g = group_gemm_args<GroupGemmNkArgs>(a);
    g.n = a.n;
    g.k = a.k;
    g.b_transposed = a.b_transposed;
    return g;
}

GroupGemmMnArgs to_internal(const moejit_group_gemm_mn_args_t &a) {
    GroupGemmMnArgs g = group_gemm_args<GroupGemmMnArgs>(a);
    g.m = a.m;
    g.n = a.n;
    return g;
}

// The fields both launchers take (designated, so each name is checked against both structs),
// then each one's own. a and aw are forward outputs: the backward neither reads nor writes them,
// so one struct can serve both calls.
template <class Args> Args to_internal_swiglu(const moejit_swiglu_args_t &c) {
    Args a{.dtype = to_internal(c.dtype), .rows = c.rows, .intermediate = c.intermediate, .merged = c.merged != 0,
           .limit = c.limit, .gate = c.gate, .up = c.up, .gate_up = c.gate_up, .w_s = c.w_s};
    if constexpr (std::is_same_v<Args, SwigluForwardArgs>) {
        a.a = c.a;
        a.aw = c.aw;
    } else {
        static_assert(std::is_same_v<Args, SwigluBackwardArgs>);
        a.daw = c.daw;
        a.d_gate = c.d_gate;
        a.d_up = c.d_up;
        a.d_gate_up = c.d_gate_up;
        a.d_w_s = c.d_w_s;
    }
    a.stream = c.stream;
    return a;
}
template SwigluForwardArgs to_internal_swiglu<SwigluForwardArgs>(const moejit_swiglu_args_t &);
template SwigluBackwardArgs to_internal_swiglu<SwigluBackwardArgs>(const moejit_swiglu_args_t &);

moejit_cache_stats_t to_c(const CacheCounters &c) {
    moejit_cache_stats_t s{};
    s.memory_hits = c.memory_hits;
    s.disk_hits = c.disk_hits;
    s.misses = c.misses;
    s.compiles = c.compiles;
    s.compile_failures = c.compile_failures;
    s.disk_rejects = c.disk_rejects;
    s.compile_seconds = c.compile_seconds;
    s.disk_load_seconds = c.disk_load_seconds;
    return s;
}

}  // namespace moejit
