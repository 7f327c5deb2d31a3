#include "runtime/nvrtc_loader.hpp"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "base/error.hpp"
#include "moejit_build_config.h"
#include "runtime/cache_paths.hpp"
#include "runtime/config.hpp"

namespace moejit {
namespace {

void add_unique(std::vector<std::string> &out, std::string path) {
    for (const std::string &o : out)
        if (o == path) return;
    out.push_back(std::move(path));
}

std::string folder_of(const std::string &path) {
    const auto slash = path.find_last_of('/');
    return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::string real_path(const std::string &path) {
    char resolved[PATH_MAX];
    return ::realpath(path.c_str(), resolved) ? std::string(resolved) : path;
}

// The libnvrtc.so* files the process has mapped now (not libnvrtc-builtins, not libnvrtc.alt).
std::vector<std::string> loaded_nvrtcs() {
    std::vector<std::string> found;
    dl_iterate_phdr(
        [](struct dl_phdr_info *info, size_t, void *data) -> int {
            const char *name = info->dlpi_name;
            if (!name || !*name) return 0;
            const char *base = std::strrchr(name, '/');
            base = base ? base + 1 : name;
            if (std::strncmp(base, "libnvrtc.so", 11) == 0)
                static_cast<std::vector<std::string> *>(data)->push_back(real_path(name));
            return 0;
        },
        &found);
    return found;
}

// "13.2" for an NVRTC the process has mapped, "?" when it cannot say.
std::string version_of_loaded(const std::string &path) {
    void *handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD | RTLD_LOCAL);
    if (!handle) {
        (void)dlerror();
        return "?";
    }
    std::string out = "?";
    using VersionFn = nvrtcResult (*)(int *, int *);
    if (auto fn = reinterpret_cast<VersionFn>(dlsym(handle, "nvrtcVersion"))) {
        int major = 0, minor = 0;
        if (fn(&major, &minor) == NVRTC_SUCCESS) out = fmt::format("{}.{}", major, minor);
    }
    dlclose(handle);  // drops only the reference RTLD_NOLOAD took
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
    const std::string folder = folder_of(api.path);
    if (folder.empty()) return;
    const std::string builtins = fmt::format("{}/libnvrtc-builtins.so.{}.{}", folder, major, minor);
    // Kept open for the process's life; a failure leaves NVRTC's own lookup and its message.
    if (dlopen(builtins.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) (void)dlerror();
}

// The warning for NVRTCs the process had mapped before moejit chose `api` (empty: none other).
std::string other_loaded_warning(const std::vector<std::string> &before, const NvrtcApi &api) {
    const std::string chosen = real_path(api.path);
    std::string others;
    for (const std::string &path : before)
        if (path != chosen) others += fmt::format("{}{} (NVRTC {})", others.empty() ? "" : ", ", path,
                                                  version_of_loaded(path));
    if (others.empty()) return {};
    int major = 0, minor = 0;
    (void)api.nvrtcVersion(&major, &minor);
    return fmt::format(
        "moejit: another NVRTC was already loaded in this process ({}, e.g. by PyTorch); moejit "
        "uses {} (NVRTC {}.{}) by its NVRTC rule ($MOEJIT_NVRTC, the CUDA toolkit, the nvidia pip "
        "packages, the soname), the same rule moejit-warmup follows, so its cache keys match; set "
        "MOEJIT_NVRTC to choose another",
        others, chosen, major, minor);
}

}  // namespace

std::vector<std::string> nvrtc_candidates() {
    std::vector<std::string> out;
    std::vector<std::string> roots = env_cuda_roots();
    roots.emplace_back(MOEJIT_DEFAULT_CUDA_HOME);
    roots.emplace_back("/usr/local/cuda");
    for (const std::string &root : roots)
        for (const char *lib : {"/lib64/", "/lib/"}) add_unique(out, root + lib + MOEJIT_NVRTC_SONAME);
    // A wheel: site-packages/moejit/libmoejit.so, site-packages/nvidia/cu13/lib/libnvrtc.so.13
    // (CUDA 13's layout) or site-packages/nvidia/cuda_nvrtc/lib/ (CUDA 12's).
    const std::string here = library_folder();
    if (!here.empty())
        for (const std::string &sub : {fmt::format("cu{}", MOEJIT_CUDA_MAJOR), std::string("cuda_nvrtc")})
            add_unique(out, fmt::format("{}/../nvidia/{}/lib/{}", here, sub, MOEJIT_NVRTC_SONAME));
    add_unique(out, MOEJIT_NVRTC_SONAME);
    return out;
}

const NvrtcApi &nvrtc() {
    static std::mutex mutex;
    static std::unique_ptr<NvrtcApi> loaded;  // never unloaded: kernels may compile until exit
    std::lock_guard<std::mutex> lock(mutex);
    if (loaded) return *loaded;

    const std::vector<std::string> before = loaded_nvrtcs();
    const std::optional<std::string> override_path = env_nvrtc_path();
    const bool overridden = override_path.has_value();
    const std::vector<std::string> tried =
        overridden ? std::vector<std::string>{*override_path} : nvrtc_candidates();
    std::string failures;
    for (const std::string &path : tried) {
        // A full path that is not there: skipped quietly (listed with the others on failure).
        struct stat st;
        if (path.find('/') != std::string::npos && ::stat(path.c_str(), &st) != 0) {
            failures += fmt::format("\n  {}: no such file", path);
            continue;
        }
        void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        std::string why;
        if (!handle) {
            const char *e = dlerror();
            why = e ? e : "dlopen failed";
            if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);  // dlerror repeats it
        } else if (auto api = resolve(handle, path, why)) {
            load_builtins_beside(*api);
            api->other_loaded = other_loaded_warning(before, *api);
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
