#include "runtime/nvrtc_loader.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "base/error.hpp"
#include "moejit_build_config.h"
#include "runtime/config.hpp"

namespace moejit {
namespace {

std::vector<std::string> candidates() {
    std::vector<std::string> out = {MOEJIT_NVRTC_SONAME};
    std::vector<std::string> roots = env_cuda_roots();
    roots.emplace_back(MOEJIT_DEFAULT_CUDA_HOME);
    roots.emplace_back("/usr/local/cuda");
    for (const std::string &root : roots)
        for (const char *lib : {"/lib64/", "/lib/"}) {
            std::string path = root + lib + MOEJIT_NVRTC_SONAME;
            bool seen = false;
            for (const std::string &o : out) seen = seen || o == path;
            if (!seen) out.push_back(path);
        }
    return out;
}

// Resolves every symbol, or says which one is missing.
std::unique_ptr<NvrtcApi> resolve(void *handle, const std::string &path, std::string &why) {
    auto api = std::make_unique<NvrtcApi>();
#define MOEJIT_NVRTC_RESOLVE(name)                                                       \
    api->name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name));               \
    if (!api->name) {                                                                    \
        why = fmt::format("{} lacks symbol {} (not NVRTC, or too old)", path, #name);    \
        return nullptr;                                                                  \
    }
    MOEJIT_NVRTC_SYMBOLS(MOEJIT_NVRTC_RESOLVE)
#undef MOEJIT_NVRTC_RESOLVE
    api->path = path;
    // A soname found by the system loader: the file it actually mapped.
    struct link_map *map = nullptr;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name)
        api->path = map->l_name;
    return api;
}

// NVRTC dlopens libnvrtc-builtins.so.<major>.<minor> by soname at its first compile, which
// finds only the system loader's copy. Loading the one beside libnvrtc first makes that lookup
// find it already mapped: the pip package's lib folder is on no search path.
void load_builtins_beside(const NvrtcApi &api) {
    int major = 0, minor = 0;
    if (api.nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return;
    const auto slash = api.path.find_last_of('/');
    if (slash == std::string::npos) return;
    const std::string builtins =
        fmt::format("{}/libnvrtc-builtins.so.{}.{}", api.path.substr(0, slash), major, minor);
    // Kept open for the process's life; a failure leaves NVRTC's own lookup and its message.
    if (dlopen(builtins.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) (void)dlerror();
}

}  // namespace

const NvrtcApi &nvrtc() {
    static std::mutex mutex;
    static std::unique_ptr<NvrtcApi> loaded;  // never unloaded: kernels may compile until exit
    std::lock_guard<std::mutex> lock(mutex);
    if (loaded) return *loaded;

    const std::optional<std::string> override_path = env_nvrtc_path();
    const bool overridden = override_path.has_value();
    const std::vector<std::string> tried =
        overridden ? std::vector<std::string>{*override_path} : candidates();
    std::string failures;
    for (const std::string &path : tried) {
        void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        std::string why;
        if (!handle) {
            const char *e = dlerror();
            why = e ? e : "dlopen failed";
            if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);  // dlerror repeats it
        } else if (auto api = resolve(handle, path, why)) {
            load_builtins_beside(*api);
            loaded = std::move(api);
            return *loaded;
        } else {
            dlclose(handle);
        }
        failures += fmt::format("\n  {}: {}", path, why);
    }
    if (overridden)
        fail(Status::compile, "NVRTC could not be loaded from $MOEJIT_NVRTC:{}", failures);
    fail(Status::compile,
         "NVRTC ({}) is needed to compile kernels and was not found; tried, in order:{}\n"
         "Install a CUDA {} toolkit (and set CUDA_HOME to it), or the CUDA {} pip packages "
         "nvidia-cuda-nvrtc and nvidia-cuda-runtime (pip install 'moejit[cuda]'), or set "
         "MOEJIT_NVRTC to the library's path.",
         MOEJIT_NVRTC_SONAME, failures, MOEJIT_CUDA_MAJOR, MOEJIT_CUDA_MAJOR);
}

}  // namespace moejit
