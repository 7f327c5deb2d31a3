// CPU test support: private temp folders and compile-only contexts (no GPU, no driver), so
// kernels are rendered and compiled with NVRTC for an explicit arch.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "capi_handles.hpp"  // moejit_context_s, for the library's Context behind a handle
#include "runtime/context.hpp"
#include "moejit.h"

namespace moejit::test {

// A fresh folder under the system temp folder, removed with everything in it.
class TempDir {
public:
    explicit TempDir(const char *tag = "moejit-test") {
        std::string pattern = (std::filesystem::temp_directory_path() / (std::string(tag) + "-XXXXXX")).string();
        if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    TempDir(const TempDir &) = delete;
    TempDir &operator=(const TempDir &) = delete;
    const std::filesystem::path &path() const { return path_; }
    std::string string() const { return path_.string(); }

private:
    std::filesystem::path path_;
};

// A compile-only context for `arch`. Disk cache: a private temp folder by default, or "" for
// memory only (every run then really compiles).
class CompileOnlyContext {
public:
    enum class Cache { private_folder, memory_only };
    explicit CompileOnlyContext(const char *arch, Cache cache = Cache::private_folder) {
        moejit_context_options_t options;
        moejit_context_options_init(&options);
        options.compile_only = 1;
        options.arch = arch;
        const std::string folder = cache == Cache::memory_only ? std::string() : dir_.string();
        options.cache_dir = folder.c_str();
        if (moejit_context_create(&options, &context_) != MOEJIT_SUCCESS)
            throw std::runtime_error(std::string("compile-only context: ") + moejit_last_error());
    }
    ~CompileOnlyContext() { moejit_context_destroy(context_); }
    CompileOnlyContext(const CompileOnlyContext &) = delete;
    CompileOnlyContext &operator=(const CompileOnlyContext &) = delete;
    moejit_context_t get() const { return context_; }
    Context &impl() const { return context_->impl; }

private:
    TempDir dir_{"moejit-compile"};
    moejit_context_t context_ = nullptr;
};

// A compile-only context without a disk cache: every run really compiles.
struct MemoryOnlyContext : CompileOnlyContext {
    explicit MemoryOnlyContext(const char *arch) : CompileOnlyContext(arch, Cache::memory_only) {}
};

}  // namespace moejit::test
