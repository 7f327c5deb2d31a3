#include "ops/swiglu.hpp"

#include <cmath>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "base/dtype.hpp"
#include "base/error.hpp"

namespace moejit {
namespace {

// Keeps column arithmetic in 32-bit ints on the device (2I < 2^31) and the unrolled loop sane.
constexpr std::int64_t kMaxIntermediate = std::int64_t{1} << 20;
constexpr std::uint32_t kThreadsPerBlock = 32u * kSwigluWarpsPerBlock;

std::string spec_suffix(const SwigluSpec &spec) {
    return fmt::format("{}_i{}_{}{}{}{}{}", dtype_name(spec.dtype), spec.intermediate,
                       spec.interleaved ? "interleaved" : spec.merged ? "merged" : "split",
                       spec.activation == Activation::gpt_oss ? "_gptoss" : "",
                       spec.has_limit ? "_limit" : "", spec.has_weights ? "_w" : "",
                       spec.has_bias ? "_bias" : "");
}

// Renders one translation unit: constants, the template, the instantiation of
// moejit::<function>_kernel. bias_arg: the forward's kBias template argument (", true" /
// ", false"); the backward has none.
template <class Args>
KernelSource render(const SwigluSpec &spec, const char *direction, const char *function, const char *bias_arg) {
    validate_swiglu_spec(spec);
    // Names predate the other activations: "swiglu_" is the op family, the suffix the activation.
    const std::string name = fmt::format("swiglu_{}_{}", direction, spec_suffix(spec));
    return instantiate_kernel<Args>(
        {name, "swiglu.cuh", fmt::format("SwiGLU {}: {}", direction, name),
         fmt::format("using T = {};\nconstexpr int kI = {};\nconstexpr int kLayout = {};\nconstexpr int kAct = {};\n"
                     "constexpr bool kLimit = {};\nconstexpr bool kWeights = {};\nconstexpr int kWarpsPerBlock = {};\n",
                     dtype_cuda_type(spec.dtype), spec.intermediate, spec.interleaved ? 2 : spec.merged ? 1 : 0,
                     static_cast<int>(spec.activation), spec.has_limit, spec.has_weights, kSwigluWarpsPerBlock),
         fmt::format("moejit::{}_kernel", function),
         fmt::format("{}, T, kI, kLayout, kAct, kLimit, kWeights{}, kWarpsPerBlock", kThreadsPerBlock, bias_arg)});
}

// The common scalar checks of forward and backward.
void validate_shape(const SwigluSpec &spec, std::int64_t rows, float limit) {
    validate_swiglu_spec(spec);
    MOEJIT_REQUIRE(rows >= 0, "rows must be >= 0 (S, the scattered row count), got {}", rows);
    MOEJIT_REQUIRE(!std::isnan(limit) && !std::isinf(limit),
                   "limit must be finite (> 0 enables the limit, <= 0 disables it), got {}",
                   limit);
    // grid_x = ceil(S / rows per block) must fit the 2^31 - 1 grid limit.
    if (rows > (std::int64_t{0x7FFFFFFF} * kSwigluWarpsPerBlock))
        fail(Status::unsupported, "rows = {} exceeds the supported maximum of {}", rows,
             std::int64_t{0x7FFFFFFF} * kSwigluWarpsPerBlock);
}

void require_tensor(const void *ptr, const char *name, std::size_t alignment,
                    const char *shape) {
    MOEJIT_REQUIRE(ptr != nullptr, "{} is NULL (expected a device pointer to {})", name, shape);
    MOEJIT_REQUIRE(reinterpret_cast<std::uintptr_t>(ptr) % alignment == 0,
                   "{} = {} is not {}-byte aligned (SwiGLU uses {}-byte vector accesses)", name,
                   ptr, alignment, alignment);
}

void require_null(const void *ptr, const char *name, bool merged) {
    MOEJIT_REQUIRE(ptr == nullptr, "{} must be NULL in the {} layout (merged = {})", name,
                   merged ? "merged" : "split", merged ? 1 : 0);
}

// Inputs shared by forward and backward; returns (gate base, up base) for the kernel: in the
// merged layout `up` is gate_up + I elements, and the row stride (2I) is compiled in.
std::pair<const void *, const void *> input_pointers(bool merged, const void *gate, const void *up,
                                                     const void *gate_up, const float *w_s, bool check) {
    if (check && w_s) require_tensor(w_s, "w_s", 4, "[S] fp32");
    if (merged) {
        if (check) {
            require_tensor(gate_up, "gate_up", 16, "[S,2I]");
            require_null(gate, "gate", true);
            require_null(up, "up", true);
        }
        // The kernel finds up in the same row (merged: I columns on; interleaved: odd columns).
        return {gate_up, nullptr};
    }
    if (check) {
        require_tensor(gate, "gate", 16, "[S,I]");
        require_tensor(up, "up", 16, "[S,I]");
        require_null(gate_up, "gate_up", false);
    }
    return {gate, up};
}

std::uint32_t grid_for(std::int64_t rows) {
    return static_cast<std::uint32_t>((rows + kSwigluWarpsPerBlock - 1) / kSwigluWarpsPerBlock);
}

LaunchShape launch_shape(std::int64_t rows) {
    LaunchShape shape;
    shape.grid_x = grid_for(rows);
    shape.block_x = kThreadsPerBlock;
    return shape;
}

}  // namespace

void validate_swiglu_spec(const SwigluSpec &spec) {
    if (!is_half_precision(spec.dtype)) {
        if (spec.dtype == DType::fp32)
            fail(Status::unsupported, "dtype fp32 is not supported by SwiGLU (expected bf16 "
                                           "or fp16)");
        fail(Status::invalid_argument,
             "dtype = {} ({}) is not valid for SwiGLU (expected MOEJIT_DTYPE_BF16 or "
             "MOEJIT_DTYPE_FP16)",
             static_cast<int>(spec.dtype), dtype_name(spec.dtype));
    }
    MOEJIT_REQUIRE(spec.intermediate > 0 && spec.intermediate % 8 == 0,
                   "intermediate (I) must be a positive multiple of 8 (16-byte vectors of {}), "
                   "got {}",
                   dtype_name(spec.dtype), spec.intermediate);
    if (spec.intermediate > kMaxIntermediate)
        fail(Status::unsupported, "intermediate (I) = {} exceeds the supported maximum {}",
             spec.intermediate, kMaxIntermediate);
    MOEJIT_REQUIRE(spec.activation == Activation::swiglu || spec.activation == Activation::gpt_oss,
                   "activation is {}, expected MOEJIT_ACTIVATION_SWIGLU (0) or MOEJIT_ACTIVATION_GPT_OSS (1)",
                   static_cast<int>(spec.activation));
    MOEJIT_REQUIRE(!spec.interleaved || spec.merged, "the interleaved layout stores gate_up [S,2I] (merged)");
    MOEJIT_REQUIRE(!spec.has_bias || spec.merged, "a bias [E,2I] needs the merged or interleaved layout");
}

KernelSource render_swiglu_forward(const SwigluSpec &spec) {
    return render<kargs::GatedForwardArgs>(spec, "fwd", "gated_forward", spec.has_bias ? ", true" : ", false");
}

KernelSource render_swiglu_backward(const SwigluSpec &spec) {
    SwigluSpec s = spec;
    s.has_bias = false;  // the backward reads the forward's biased g and u
    return render<kargs::GatedBackwardArgs>(s, "bwd", "gated_backward", "");
}

SwigluSpec swiglu_spec(const SwigluForwardArgs &args) {
    return SwigluSpec{args.dtype,        args.intermediate,  args.merged,          args.limit > 0.0f,
                      args.w_s != nullptr, args.interleaved, args.activation, args.bias != nullptr};
}

SwigluSpec swiglu_spec(const SwigluBackwardArgs &args) {
    return SwigluSpec{args.dtype,          args.intermediate, args.merged,     args.limit > 0.0f,
                      args.w_s != nullptr, args.interleaved,  args.activation, false};
}

namespace {

// What both directions check first: the spec's shape, then (when there are rows) the inputs
// gate and up or gate_up, and w_s; gives the gate and up pointers the kernel reads.
template <class Args> std::pair<const void *, const void *> checked_inputs(const SwigluSpec &spec, const Args &args) {
    validate_shape(spec, args.rows, args.limit);
    return input_pointers(args.merged, args.gate, args.up, args.gate_up, args.w_s, args.rows > 0);
}

}  // namespace

void swiglu_forward(Context &ctx, const SwigluForwardArgs &args, const Kernel *bound) {
    const SwigluSpec spec = swiglu_spec(args);
    auto [gate, up] = checked_inputs(spec, args);
    // Empty tensors may come as NULL (frameworks do that); there is nothing to check then.
    const bool check = args.rows > 0;
    if (check) {
        MOEJIT_REQUIRE(args.a != nullptr || args.aw != nullptr,
                       "a and aw are both NULL (expected at least one [S,I] output)");
        if (args.a) require_tensor(args.a, "a", 16, "[S,I]");
        if (args.aw) require_tensor(args.aw, "aw", 16, "[S,I]");
    }
    MOEJIT_REQUIRE(std::isfinite(args.alpha), "alpha must be finite, got {}", args.alpha);
    if (check && args.bias) {
        require_tensor(args.bias, "bias", 16, "[E,2I]");
        MOEJIT_REQUIRE(args.offsets != nullptr && args.num_experts >= 1,
                       "a bias needs offsets [E+1] and num_experts >= 1 (got {}, {})",
                       static_cast<const void *>(args.offsets), args.num_experts);
    }
    ctx.require_device("moejit_swiglu_forward");
    if (args.rows == 0) return;
    const Kernel &kernel = bound ? *bound : ctx.kernel(render_swiglu_forward(spec));
    ctx.launch(kernel, launch_shape(args.rows), args.stream,
               kargs::GatedForwardArgs{gate, up, args.w_s, args.a, args.aw, args.rows, args.limit, args.alpha, args.bias,
                                     args.offsets, args.num_experts});
}

void swiglu_backward(Context &ctx, const SwigluBackwardArgs &args, const Kernel *bound) {
    const SwigluSpec spec = swiglu_spec(args);
    auto [gate, up] = checked_inputs(spec, args);
    const bool check = args.rows > 0;
    void *d_gate = args.d_gate, *d_up = args.d_up;
    if (check) {
        require_tensor(args.daw, "daw", 16, "[S,I]");
        if (args.merged) {
            require_tensor(args.d_gate_up, "d_gate_up", 16, "[S,2I]");
            require_null(args.d_gate, "d_gate", true);
            require_null(args.d_up, "d_up", true);
        } else {
            require_tensor(args.d_gate, "d_gate", 16, "[S,I]");
            require_tensor(args.d_up, "d_up", 16, "[S,I]");
            require_null(args.d_gate_up, "d_gate_up", false);
        }
        if (args.d_w_s) require_tensor(args.d_w_s, "d_w_s", 4, "[S] fp32");
        if (args.aw) require_tensor(args.aw, "aw", 16, "[S,I]");
    }
    ctx.require_device("moejit_swiglu_backward");
    if (args.rows == 0) return;
    if (args.merged) {
        d_gate = args.d_gate_up;  // the kernel finds up in the same row
        d_up = nullptr;
    }
    const Kernel &kernel = bound ? *bound : ctx.kernel(render_swiglu_backward(spec));
    ctx.launch(kernel, launch_shape(args.rows), args.stream,
               kargs::GatedBackwardArgs{gate, up, args.w_s, args.daw, d_gate, d_up, args.d_w_s, args.aw, args.rows,
                                      args.limit, args.alpha});
}

}  // namespace moejit
