#include "runtime/driver.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "base/error.hpp"
#include "runtime/config.hpp"

namespace moejit {
namespace {

#define MOEJIT_STRINGIZE_EXPANDED(x) MOEJIT_STRINGIZE(x)
#define MOEJIT_STRINGIZE(x) #x

struct LoadedDriver {
    DriverApi api;
    Status status = Status::success;
    std::string message;
};

LoadedDriver load_driver() {
    LoadedDriver loaded;
    // Tests point this at a missing file to exercise the no-driver path on a GPU host too.
    const std::string path = env_libcuda_path().value_or("libcuda.so.1");
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        loaded.status = Status::no_driver;
        loaded.message = fmt::format("CUDA driver not found: dlopen(\"{}\") failed: {}", path,
                                     why ? why : "unknown reason");
        return loaded;
    }
#define MOEJIT_DRIVER_RESOLVE(name)                                                          \
    loaded.api.name = reinterpret_cast<decltype(&::name)>(                                   \
        dlsym(handle, MOEJIT_STRINGIZE_EXPANDED(name)));                                     \
    if (!loaded.api.name) {                                                                  \
        loaded.status = Status::no_driver;                                              \
        loaded.message = fmt::format("CUDA driver {} lacks symbol {} (driver too old?)", path, \
                                     MOEJIT_STRINGIZE_EXPANDED(name));                       \
        return loaded;                                                                       \
    }
    MOEJIT_DRIVER_SYMBOLS(MOEJIT_DRIVER_RESOLVE)
#undef MOEJIT_DRIVER_RESOLVE
#define MOEJIT_DRIVER_RESOLVE_OPTIONAL(name) \
    loaded.api.name = reinterpret_cast<decltype(&::name)>(dlsym(handle, MOEJIT_STRINGIZE_EXPANDED(name)));
    MOEJIT_DRIVER_OPTIONAL_SYMBOLS(MOEJIT_DRIVER_RESOLVE_OPTIONAL)
#undef MOEJIT_DRIVER_RESOLVE_OPTIONAL
    // The handle is intentionally never closed: function pointers outlive every context.
    CUresult result = loaded.api.cuInit(0);
    if (result == CUDA_ERROR_NO_DEVICE) {
        loaded.status = Status::no_device;
        loaded.message = "cuInit: no CUDA device found (CUDA_ERROR_NO_DEVICE)";
    } else if (result != CUDA_SUCCESS) {
        const char *name = nullptr;
        const char *text = nullptr;
        loaded.api.cuGetErrorName(result, &name);
        loaded.api.cuGetErrorString(result, &text);
        loaded.status = (result == CUDA_ERROR_STUB_LIBRARY || result == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)
                            ? Status::no_driver
                            : Status::cuda;
        loaded.message = fmt::format("cuInit(0) failed: {} ({})", name ? name : "?",
                                     text ? text : "?");
    }
    return loaded;
}

}  // namespace

const DriverApi &driver() {
    static const LoadedDriver loaded = load_driver();  // thread-safe one-time init
    if (loaded.status != Status::success) throw Error(loaded.status, loaded.message);
    return loaded.api;
}

void check_cuda(CUresult result, const char *call) {
    if (result == CUDA_SUCCESS) return;
    const char *name = nullptr;
    const char *text = nullptr;
    const DriverApi &api = driver();
    if (api.cuGetErrorName(result, &name) != CUDA_SUCCESS) name = nullptr;
    if (api.cuGetErrorString(result, &text) != CUDA_SUCCESS) text = nullptr;
    fail(Status::cuda, "{} failed: {} ({}): {}", call, name ? name : "unknown CUresult",
         static_cast<int>(result), text ? text : "no description");
}

}  // namespace moejit
