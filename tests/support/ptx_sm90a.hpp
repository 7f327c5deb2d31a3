// CPU test support: the PTX NVRTC makes of a rendered kernel for compute_90a. The compile-only
// context makes cubins; the PTX shows which instructions a kernel uses.
#pragma once

#include <boost/test/unit_test.hpp>

#include <nvrtc.h>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

#include "runtime/kernel_source.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/templates.hpp"

namespace moejit::test {

inline void require_nvrtc(nvrtcResult r, const char *what) {
    BOOST_REQUIRE_MESSAGE(r == NVRTC_SUCCESS, what << ": " << nvrtcGetErrorString(r));
}

// Compiled with the engine's options and its embedded headers; fails the test (with NVRTC's log)
// if NVRTC does.
inline std::string ptx_for_sm90a(const KernelSource &ks) {
    std::vector<std::string> storage;
    for (const EmbeddedTemplate &t : embedded_templates()) {
        storage.emplace_back(t.source);
        storage.emplace_back(t.name);
    }
    std::vector<const char *> sources, names;
    for (std::size_t i = 0; i < storage.size(); i += 2) {
        sources.push_back(storage[i].c_str());
        names.push_back(storage[i + 1].c_str());
    }
    nvrtcProgram program = nullptr;
    require_nvrtc(nvrtcCreateProgram(&program, ks.source.c_str(), (ks.name + ".cu").c_str(),
                                     static_cast<int>(sources.size()), sources.data(), names.data()),
                  "nvrtcCreateProgram");
    std::vector<std::string> options = default_nvrtc_options();
    options.push_back("--gpu-architecture=compute_90a");
    options.push_back("-I" + cuda_include_dir());
    std::vector<const char *> argv;
    for (const std::string &o : options) argv.push_back(o.c_str());
    const nvrtcResult r = nvrtcCompileProgram(program, static_cast<int>(argv.size()), argv.data());
    std::size_t log_size = 0;
    std::string log;
    if (nvrtcGetProgramLogSize(program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
        log.resize(log_size);
        nvrtcGetProgramLog(program, log.data());
    }
    BOOST_REQUIRE_MESSAGE(r == NVRTC_SUCCESS, "NVRTC: " << nvrtcGetErrorString(r) << "\n" << log);
    std::size_t size = 0;
    require_nvrtc(nvrtcGetPTXSize(program, &size), "nvrtcGetPTXSize");
    std::string ptx(size, '\0');
    require_nvrtc(nvrtcGetPTX(program, ptx.data()), "nvrtcGetPTX");
    nvrtcDestroyProgram(&program);
    return ptx;
}

// Fails the test for each instruction of `uses` the PTX lacks and each of `avoids` it has.
inline void check_ptx(const std::string &ptx, std::initializer_list<std::string> uses,
                      std::initializer_list<std::string> avoids = {}) {
    for (const std::string &i : uses) BOOST_TEST(ptx.find(i) != std::string::npos, "the PTX lacks " << i);
    for (const std::string &i : avoids) BOOST_TEST(ptx.find(i) == std::string::npos, "the PTX has " << i);
}

}  // namespace moejit::test
