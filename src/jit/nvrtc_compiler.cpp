#include "jit/nvrtc_compiler.hpp"

#include <nvrtc.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "core/error.hpp"
#include "jit/templates.hpp"
#include "moejit_build_config.h"

namespace moejit {
namespace {

void check_nvrtc(nvrtcResult result, const char *call, const std::string &name) {
    if (result != NVRTC_SUCCESS)
        fail(MOEJIT_ERROR_COMPILE, "{} failed for kernel {}: {}", call, name,
             nvrtcGetErrorString(result));
}

struct Program {
    nvrtcProgram handle = nullptr;
    ~Program() {
        if (handle) nvrtcDestroyProgram(&handle);
    }
};

bool file_exists(const std::string &path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

bool valid_arch(const std::string &arch) {
    if (arch.size() < 5 || arch.compare(0, 3, "sm_") != 0) return false;
    std::string digits = arch.substr(3);
    if (!digits.empty() && digits.back() == 'a') digits.pop_back();
    if (digits.size() < 2 || digits.size() > 3) return false;
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return false;
    return std::stoi(digits) >= 80;
}

int nvrtc_version() {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return 0;
    return major * 100 + minor;
}

const std::string &cuda_include_dir() {
    static const std::string dir = [] {
        std::vector<std::string> roots;
        for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
            if (const char *v = std::getenv(var); v && *v) roots.emplace_back(v);
        roots.emplace_back(MOEJIT_DEFAULT_CUDA_HOME);
        roots.emplace_back("/usr/local/cuda");
        for (const std::string &root : roots)
            if (file_exists(root + "/include/cuda_bf16.h")) return root + "/include";
        return std::string();
    }();
    return dir;
}

std::vector<std::string> default_nvrtc_options() {
    // Sorted: the option list is part of the cache key in canonical (sorted) form.
    std::vector<std::string> options = {"--std=c++17", "-default-device",
                                        "-DMOEJIT_JIT=1"};
    std::sort(options.begin(), options.end());
    return options;
}

CompiledKernel nvrtc_compile(const KernelSource &source, const std::string &arch,
                             const std::vector<std::string> &options) {
    auto start = std::chrono::steady_clock::now();
    // Every embedded template is offered as an in-memory header; NVRTC reads only those used.
    std::vector<const char *> header_sources, header_names;
    std::vector<std::string> header_storage;
    auto templates = embedded_templates();
    header_storage.reserve(templates.size() * 2);
    for (const EmbeddedTemplate &t : templates) {
        header_storage.emplace_back(t.source);
        header_storage.emplace_back(t.name);
    }
    for (std::size_t i = 0; i < templates.size(); ++i) {
        header_sources.push_back(header_storage[2 * i].c_str());
        header_names.push_back(header_storage[2 * i + 1].c_str());
    }
    Program program;
    std::string file_name = source.name + ".cu";
    check_nvrtc(nvrtcCreateProgram(&program.handle, source.source.c_str(), file_name.c_str(),
                                   static_cast<int>(header_sources.size()), header_sources.data(),
                                   header_names.data()),
                "nvrtcCreateProgram", source.name);

    std::vector<std::string> all = options;
    all.push_back("--gpu-architecture=" + arch);
    const std::string &include = cuda_include_dir();
    if (include.empty())
        fail(MOEJIT_ERROR_COMPILE,
             "cannot compile kernel {}: cuda_bf16.h not found (set CUDA_HOME to the CUDA toolkit)",
             source.name);
    all.push_back("-I" + include);
    std::vector<const char *> argv;
    for (const std::string &o : all) argv.push_back(o.c_str());

    nvrtcResult result = nvrtcCompileProgram(program.handle, static_cast<int>(argv.size()), argv.data());
    CompiledKernel out;
    std::size_t log_size = 0;
    if (nvrtcGetProgramLogSize(program.handle, &log_size) == NVRTC_SUCCESS && log_size > 1) {
        out.log.resize(log_size);
        if (nvrtcGetProgramLog(program.handle, out.log.data()) != NVRTC_SUCCESS) out.log.clear();
        while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
    }
    if (result != NVRTC_SUCCESS) {
        std::string joined;
        for (const std::string &o : all) joined += (joined.empty() ? "" : " ") + o;
        fail(MOEJIT_ERROR_COMPILE, "NVRTC failed to compile kernel {} ({}) for {}: {}\noptions: {}\nlog:\n{}",
             source.name, source.entry, arch, nvrtcGetErrorString(result), joined, out.log);
    }
    std::size_t size = 0;
    check_nvrtc(nvrtcGetCUBINSize(program.handle, &size), "nvrtcGetCUBINSize", source.name);
    out.cubin.resize(size);
    check_nvrtc(nvrtcGetCUBIN(program.handle, out.cubin.data()), "nvrtcGetCUBIN", source.name);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
}

}  // namespace moejit
