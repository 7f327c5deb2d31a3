// NVRTC, loaded lazily with dlopen like libcuda: libmoejit.so has no DT_NEEDED on libnvrtc, so
// it loads where NVRTC comes from the CUDA toolkit, from the nvidia-cuda-nvrtc pip package, or
// is absent (then only compiling fails, with a message naming what is missing and where).
#pragma once

#include <nvrtc.h>

#include <string>

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
};

// The loaded NVRTC. Lookup: $MOEJIT_NVRTC alone when set; else the build's soname
// (libnvrtc.so.<CUDA major>) through the system loader (which also finds a copy already
// loaded, e.g. by the Python package or PyTorch), then lib64/ and lib/ of $CUDA_HOME,
// $CUDA_PATH, the build's toolkit and /usr/local/cuda. Throws Status::compile naming every
// path tried. A failure is not remembered: the next call looks again.
const NvrtcApi &nvrtc();

}  // namespace moejit
