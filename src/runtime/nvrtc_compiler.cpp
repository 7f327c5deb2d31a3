#include "runtime/nvrtc_compiler.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "base/error.hpp"
#include "runtime/config.hpp"
#include "runtime/nvrtc_loader.hpp"
#include "runtime/templates.hpp"
#include "moejit_build_config.h"

namespace moejit {
namespace {

void check_nvrtc(const NvrtcApi &api, nvrtcResult result, const char *call,
                 const std::string &name) {
    if (result != NVRTC_SUCCESS)
        fail(Status::compile, "{} failed for kernel {}: {}", call, name,
             api.nvrtcGetErrorString(result));
}

struct Program {
    const NvrtcApi &api;
    nvrtcProgram handle = nullptr;
    ~Program() {
        if (handle) api.nvrtcDestroyProgram(&handle);
    }
};

std::string parent_dir(const std::string &path) {
    const auto slash = path.find_last_of('/');
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

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
    if (nvrtc().nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return 0;
    return major * 100 + minor;
}

std::vector<std::string> cuda_include_candidates() {
    std::vector<std::string> dirs;
    for (const std::string &root : env_cuda_roots()) dirs.push_back(root + "/include");
    // <root>/lib64/libnvrtc.so.N -> <root>/include: the toolkit and the nvidia pip packages
    // (nvidia/cuNN/lib, nvidia/cuNN/include) both keep the headers there.
    dirs.push_back(parent_dir(parent_dir(nvrtc().path)) + "/include");
    dirs.push_back(std::string(MOEJIT_DEFAULT_CUDA_HOME) + "/include");
    dirs.push_back("/usr/local/cuda/include");
    return dirs;
}

std::string cuda_include_dir() {
    for (const std::string &dir : cuda_include_candidates())
        if (file_exists(dir + "/cuda_bf16.h")) return dir;
    return std::string();
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
    const NvrtcApi &api = nvrtc();
    Program program{api};
    std::string file_name = source.name + ".cu";
    check_nvrtc(api, api.nvrtcCreateProgram(&program.handle, source.source.c_str(), file_name.c_str(),
                                   static_cast<int>(header_sources.size()), header_sources.data(),
                                   header_names.data()),
                "nvrtcCreateProgram", source.name);

    // Registered before compiling, so NVRTC records the entry's mangled name.
    check_nvrtc(api, api.nvrtcAddNameExpression(program.handle, source.entry.c_str()), "nvrtcAddNameExpression",
                source.name);

    std::vector<std::string> all = options;
    all.push_back("--gpu-architecture=" + arch);
    const std::string include = cuda_include_dir();
    if (include.empty()) {
        std::string looked;
        for (const std::string &dir : cuda_include_candidates()) looked += "\n  " + dir;
        fail(Status::compile,
             "cannot compile kernel {}: the CUDA headers NVRTC needs (cuda_bf16.h) were not found "
             "in:{}\nSet CUDA_HOME to a CUDA toolkit, or install the nvidia-cuda-runtime pip "
             "package of NVRTC's major version (pip install 'moejit[cuda]').",
             source.name, looked);
    }
    all.push_back("-I" + include);
    std::vector<const char *> argv;
    for (const std::string &o : all) argv.push_back(o.c_str());

    nvrtcResult result = api.nvrtcCompileProgram(program.handle, static_cast<int>(argv.size()), argv.data());
    CompiledKernel out;
    std::size_t log_size = 0;
    if (api.nvrtcGetProgramLogSize(program.handle, &log_size) == NVRTC_SUCCESS && log_size > 1) {
        out.log.resize(log_size);
        if (api.nvrtcGetProgramLog(program.handle, out.log.data()) != NVRTC_SUCCESS) out.log.clear();
        while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
    }
    if (result != NVRTC_SUCCESS) {
        std::string joined;
        for (const std::string &o : all) joined += (joined.empty() ? "" : " ") + o;
        fail(Status::compile, "NVRTC failed to compile kernel {} ({}) for {}: {}\noptions: {}\nlog:\n{}",
             source.name, source.entry, arch, api.nvrtcGetErrorString(result), joined, out.log);
    }
    std::size_t size = 0;
    check_nvrtc(api, api.nvrtcGetCUBINSize(program.handle, &size), "nvrtcGetCUBINSize", source.name);
    out.cubin.resize(size);
    check_nvrtc(api, api.nvrtcGetCUBIN(program.handle, out.cubin.data()), "nvrtcGetCUBIN", source.name);
    const char *lowered = nullptr;  // owned by the program
    check_nvrtc(api, api.nvrtcGetLoweredName(program.handle, source.entry.c_str(), &lowered), "nvrtcGetLoweredName",
                source.name);
    if (lowered == nullptr || *lowered == '\0')
        fail(Status::compile, "NVRTC gave no lowered name for kernel {} ({})", source.name, source.entry);
    out.lowered_name = lowered;
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
}

}  // namespace moejit
