// NVRTC, loaded lazily with dlopen like libcuda: libmoejit.so has no DT_NEEDED on libnvrtc, so
// it loads where NVRTC comes from the CUDA toolkit, from the nvidia-cuda-nvrtc pip package, or
// is absent (then only compiling fails, with a message naming what is missing and where).
#pragma once

#include <nvrtc.h>

#include <string>
#include <vector>

namespace moejit {

#define MOEJIT_NVRTC_SYMBOLS(X) \
    X(nvrtcVersion)             \
    X(nvrtcGetErrorString)      \
    X(nvrtcCreateProgram)       \
    X(nvrtcDestroyProgram)      \
    X(nvrtcCompileProgram)      \
    X(nvrtcGetProgramLogSize)   \
    X(nvrtcGetProgramLog)       \
    X(nvrtcGetCUBINSize)        \
    X(nvrtcGetCUBIN)            \
    X(nvrtcAddNameExpression)   \
    X(nvrtcGetLoweredName)      \
    X(nvrtcGetNumSupportedArchs) \
    X(nvrtcGetSupportedArchs)

struct NvrtcApi {
#define MOEJIT_NVRTC_MEMBER(name) decltype(&::name) name = nullptr;
    MOEJIT_NVRTC_SYMBOLS(MOEJIT_NVRTC_MEMBER)
#undef MOEJIT_NVRTC_MEMBER
    std::string path;  // the file the loader mapped: the CUDA headers are looked for next to it
    // Set when the process had already mapped another libnvrtc.so.* (e.g. PyTorch's pip copy)
    // before moejit chose this one: a warning naming both, to be logged once (JitEngine).
    std::string other_loaded;
};

// One NVRTC rule for every caller (moejit-warmup, the C ABI, a PyTorch process), whatever the
// process loaded before, so that a cache warmed by one is found by the others (the NVRTC
// version and the headers beside it are part of every kernel's key):
//   1. $MOEJIT_NVRTC alone, when set (a path or a soname);
//   2. the toolkits: lib64/ and lib/ of $CUDA_HOME, $CUDA_PATH, the build's toolkit and
//      /usr/local/cuda;
//   3. the nvidia pip packages beside the folder holding libmoejit.so (a wheel install:
//      site-packages/nvidia/cu<major>/lib, site-packages/nvidia/cuda_nvrtc/lib);
//   4. the soname libnvrtc.so.<CUDA major> through the system loader (LD_LIBRARY_PATH, the
//      loader cache, or a copy already loaded by soname).
// Steps 1-3 dlopen the full path with RTLD_LOCAL: a different NVRTC already in the process
// (PyTorch's) does not replace the rule's choice; it is reported in `other_loaded`.
// Throws Status::compile naming every path tried. A failure is not remembered: the next call
// looks again.
const NvrtcApi &nvrtc();

// The candidates of steps 2-4 above, in order (for tests and error messages).
std::vector<std::string> nvrtc_candidates();

}  // namespace moejit
