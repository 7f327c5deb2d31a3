// A kernel specialization ready for NVRTC: the whole rendered translation unit, and the typed
// kernel ABI's host half (templates/kernel_args.h holds the structs both sides compile).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "templates/kernel_args.h"

namespace moejit {

struct KernelSource {
    // Readable, file-name safe ([a-z0-9_]), e.g. "scatter_bf16_h2048_k8"; names the cache file.
    std::string name;
    // The embedded template the source includes, e.g. "scatter_gather.cuh" (part of the key).
    std::string template_name;
    // The kernel as a name expression, e.g. "moejit::sg::scatter_kernel<128, T, kHidden, ...>":
    // NVRTC lowers it to the symbol the module is searched for (nvrtcGetLoweredName).
    std::string entry;
    // The full translation unit: constants rendered with fmt, then #include of the template,
    // then the explicit instantiation of `entry`. Hashed whole into the cache key.
    std::string source;
    // sizeof the kernel's one parameter, its argument struct: the loaded kernel must report
    // exactly this (runtime/jit_engine.cpp), and every launch must pass a struct of this size.
    std::size_t param_bytes = 0;
};

// The device spelling of each argument struct, for the explicit instantiation's signature.
template <class Args> inline constexpr const char *kernel_args_type = nullptr;
#define MOEJIT_KERNEL_ARGS(X)                                                                        \
    X(RoutingHistogramArgs) X(RoutingRowScanArgs) X(RoutingRankArgs) X(ScatterArgs) X(GatherArgs)   \
    X(ScatterWeightsArgs) X(GatherWeightsArgs) X(GatedForwardArgs) X(GatedBackwardArgs)             \
    X(BiasPartialArgs) X(BiasReduceArgs) X(BiasRowDotArgs) X(PrepareRowsArgs) X(AddRowBiasArgs)     \
    X(GemmNkArgs) X(GemmMnArgs) X(Sm90NkArgs) X(Sm90MnArgs) X(SplitReduceArgs)                       \
    X(Fp8QuantRowsArgs) X(Fp8QuantBlocksArgs) X(Sm90Fp8NkArgs) X(CheckOffsetsArgs)                   \
    X(ZeroUnassignedRowsArgs) X(Fp8QuantColsArgs) X(Sm90Fp8WgradArgs) X(Fp8QuantScatterArgs)         \
    X(Fp8QuantRowsLdArgs) X(Fp8QuantBlocksTArgs) X(Fp8DequantRowsArgs) X(Fp8SwigluQuantArgs)   \
    X(Fp8SwigluBackwardQuantArgs)
#define MOEJIT_KERNEL_ARGS_TYPE(T) \
    template <> inline constexpr const char *kernel_args_type<kargs::T> = "moejit::kargs::" #T;
MOEJIT_KERNEL_ARGS(MOEJIT_KERNEL_ARGS_TYPE)
#undef MOEJIT_KERNEL_ARGS_TYPE

// The translation unit of one kernel: a title comment, the common header and the template, the
// specialization's constants in an anonymous namespace, and the explicit instantiation
// `template __global__ void <kernel><<template_args>>(const __grid_constant__ <Args>);` of a
// typed kernel template (the instantiation repeats the parameter's annotation, as NVRTC requires).
struct KernelInstance {
    std::string name;           // KernelSource::name
    std::string template_name;  // e.g. "swiglu.cuh"
    std::string title;          // the first line, after "// moejit "
    std::string constants;      // lines ending in '\n' (may be empty)
    std::string kernel;         // the __global__ template, e.g. "moejit::sg::scatter_kernel"
    std::string template_args;  // e.g. "128, T, kHidden, kTopK"
};
KernelSource render_instance(const KernelInstance &k, const char *args_type, std::size_t param_bytes);

template <class Args> KernelSource instantiate_kernel(const KernelInstance &k) {
    static_assert(kernel_args_type<Args> != nullptr, "not a kernel argument struct of templates/kernel_args.h");
    return render_instance(k, kernel_args_type<Args>, sizeof(Args));
}

}  // namespace moejit
