// NVRTC: one translation unit to a cubin for an explicit arch, with embedded templates as
// in-memory headers and the CUDA include folder on the path. The log comes back in the error.
#pragma once

#include <string>
#include <vector>

#include "runtime/kernel_source.hpp"

namespace moejit {

struct CompiledKernel {
    std::vector<char> cubin;
    // The symbol NVRTC gave KernelSource::entry (nvrtcGetLoweredName): what the module is
    // searched for.
    std::string lowered_name;
    std::string log;
    double seconds = 0;
    // Compiled in a worker process (runtime/compile_worker.hpp): its CPU time; else negative.
    double worker_cpu_seconds = -1;
};

// Options every compile uses (sorted; the arch and include folder are added by compile()).
std::vector<std::string> default_nvrtc_options();

// Throws Status::compile with the NVRTC log, the kernel name and the options.
CompiledKernel nvrtc_compile(const KernelSource &source, const std::string &arch,
                             const std::vector<std::string> &options);

// "sm_90a" -> "compute_90a"-style validation: sm_XY or sm_XYa with XY >= 80.
bool valid_arch(const std::string &arch);

// major*100 + minor of the loaded NVRTC; throws Status::compile when there is none.
int nvrtc_version();

// Where NVRTC looks for cuda_bf16.h, in order: $CUDA_HOME/include, $CUDA_PATH/include, the
// include/ next to the loaded NVRTC's lib folder, the build-time toolkit, /usr/local/cuda.
std::vector<std::string> cuda_include_candidates();

// The first of those holding cuda_bf16.h, or "" (the compile then fails naming them all).
std::string cuda_include_dir();

}  // namespace moejit
