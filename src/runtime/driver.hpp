// The CUDA driver, loaded lazily from libcuda.so.1 with dlopen: the library must load (and
// compile kernels) on a machine without a GPU, so it never links against libcuda.
#pragma once

#include <cuda.h>

namespace moejit {

// cuda.h maps e.g. cuMemAlloc to cuMemAlloc_v2 with macros; stringizing through one more macro
// level gives the versioned symbol name that the macro expands to.
#define MOEJIT_DRIVER_SYMBOLS(X)  \
    X(cuInit)                     \
    X(cuDriverGetVersion)         \
    X(cuDeviceGetCount)           \
    X(cuDeviceGet)                \
    X(cuDeviceGetAttribute)       \
    X(cuDeviceGetName)            \
    X(cuDevicePrimaryCtxRetain)   \
    X(cuDevicePrimaryCtxRelease)  \
    X(cuCtxGetCurrent)            \
    X(cuCtxSetCurrent)            \
    X(cuCtxPushCurrent)           \
    X(cuCtxPopCurrent)            \
    X(cuCtxSynchronize)           \
    X(cuModuleLoadData)           \
    X(cuModuleUnload)             \
    X(cuModuleGetFunction)        \
    X(cuFuncSetAttribute)         \
    X(cuFuncGetAttribute)         \
    X(cuLaunchKernel)             \
    X(cuGetErrorName)             \
    X(cuGetErrorString)           \
    X(cuMemAlloc)                 \
    X(cuMemFree)                  \
    X(cuMemcpyHtoD)               \
    X(cuMemcpyDtoH)               \
    X(cuMemcpyDtoDAsync)          \
    X(cuMemsetD8Async)            \
    X(cuMemsetD32Async)           \
    X(cuStreamCreate)             \
    X(cuStreamDestroy)            \
    X(cuStreamSynchronize)        \
    X(cuStreamBeginCapture)       \
    X(cuStreamEndCapture)         \
    X(cuStreamIsCapturing)        \
    X(cuGraphInstantiate)         \
    X(cuGraphLaunch)              \
    X(cuGraphDestroy)             \
    X(cuGraphExecDestroy)         \
    X(cuEventCreate)              \
    X(cuEventDestroy)             \
    X(cuEventRecord)              \
    X(cuEventSynchronize)         \
    X(cuEventElapsedTime)         \
    X(cuTensorMapEncodeTiled)

// Symbols a driver may lack (newer than the oldest driver the library supports): null when
// absent, and each caller says what it skips without them. cuFuncGetParamInfo: CUDA 12.4.
#define MOEJIT_DRIVER_OPTIONAL_SYMBOLS(X) \
    X(cuFuncGetParamInfo)

struct DriverApi {
#define MOEJIT_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
    MOEJIT_DRIVER_SYMBOLS(MOEJIT_DRIVER_MEMBER)
    MOEJIT_DRIVER_OPTIONAL_SYMBOLS(MOEJIT_DRIVER_MEMBER)
#undef MOEJIT_DRIVER_MEMBER
};

// Loads libcuda.so.1 and calls cuInit(0) once, thread-safely. Throws Error:
// Status::no_driver (library or a symbol missing), Status::no_device (cuInit says
// there is none), Status::cuda (anything else). A failure is remembered and rethrown.
const DriverApi &driver();

// Throws Status::cuda naming `call` with cuGetErrorName / cuGetErrorString.
void check_cuda(CUresult result, const char *call);

}  // namespace moejit

// MOEJIT_CU(cuMemAlloc(&p, n)) calls through the lazily loaded table and checks the result.
#define MOEJIT_CU(call) ::moejit::check_cuda(::moejit::driver().call, #call)
