#include "jit/jit_engine.hpp"

#include <algorithm>
#include <chrono>

#include "core/error.hpp"
#include "driver/driver.hpp"
#include "jit/cuda_headers.hpp"  // cache-key line below (issue 16)
#include "jit/nvrtc_compiler.hpp"
#include "jit/templates.hpp"
#include "moejit_version.h"

namespace moejit {

JitEngine::JitEngine(JitOptions options)
    : options_(std::move(options)), options_sorted_(default_nvrtc_options()) {
    std::sort(options_sorted_.begin(), options_sorted_.end());
    disk_ = std::make_unique<DiskCache>(options_.cache_dir, options_.log);
}

JitEngine::~JitEngine() {
    if (!options_.load_modules) return;
    for (auto &[source, entry] : loaded_)
        if (entry->module) driver().cuModuleUnload(entry->module);  // best effort at teardown
}

const std::string &JitEngine::cache_dir() const {
    static const std::string none;
    return disk_->usable() ? disk_->folder() : none;
}

Digest JitEngine::key(const KernelSource &source) const {
    // Canonical, length-prefixed record (DESIGN.md §4). Any field change changes the key.
    Sha256 h;
    h.field("moejit-kernel-key");
    h.field(std::to_string(kCacheFormatVersion));
    h.field(source.template_name);
    h.field(source.entry);
    h.field(source.source);
    for (std::string_view header : template_include_closure(source.source)) {
        const EmbeddedTemplate *t = find_template(header);
        h.field(header);
        h.field(to_hex(sha256(t->source)));
    }
    h.field(std::to_string(options_sorted_.size()));
    for (const std::string &o : options_sorted_) h.field(o);
    h.field(options_.arch);
    h.field(std::to_string(nvrtc_version()));
    h.field(cuda_headers_digest());  // the toolkit headers NVRTC compiles against (jit/cuda_headers.hpp)
    h.field(MOEJIT_VERSION_STRING);
    return h.finish();
}

CacheCounters JitEngine::counters() const {
    std::lock_guard lock(mutex_);
    return counters_;
}

Kernel &JitEngine::get(const KernelSource &source) {
    // One lock for the whole lookup: two threads asking for the same kernel compile it once.
    // Different kernels compile serially within one context; the warmup tool parallelises
    // across contexts (one per worker) that share the disk cache.
    std::lock_guard lock(mutex_);
    if (auto it = loaded_.find(source.source); it != loaded_.end()) {
        ++counters_.memory_hits;
        return it->second->kernel;
    }
    Digest k = key(source);
    std::vector<char> cubin;
    auto load_start = std::chrono::steady_clock::now();
    DiskCache::Lookup lookup = disk_->load(source.name, k, cubin);
    if (lookup == DiskCache::Lookup::hit) {
        ++counters_.disk_hits;
        counters_.disk_load_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
    } else {
        ++counters_.misses;
        if (lookup == DiskCache::Lookup::rejected) ++counters_.disk_rejects;
        if (!options_.jit_enabled)
            fail(MOEJIT_ERROR_JIT_DISABLED,
                 "kernel {} ({}) for {} is not in the cache{} and JIT compilation is off "
                 "(MOEJIT_COMPILE=off or jit_mode); run moejit-warmup for this model first",
                 source.name, to_hex(k), options_.arch,
                 disk_->usable() ? " " + disk_->folder() : std::string(" (no disk cache)"));
        CompiledKernel compiled;
        try {
            compiled = nvrtc_compile(source, options_.arch, options_sorted_);
        } catch (const Error &) {
            ++counters_.compile_failures;
            throw;
        }
        ++counters_.compiles;
        counters_.compile_seconds += compiled.seconds;
        if (!compiled.log.empty())
            options_.log(MOEJIT_LOG_DEBUG, fmt::format("moejit: NVRTC log for {}:\n{}", source.name, compiled.log));
        options_.log(MOEJIT_LOG_INFO, fmt::format("moejit: compiled {} for {} in {:.3f} s",
                                                  source.name, options_.arch, compiled.seconds));
        disk_->store(source.name, k, compiled.cubin);
        cubin = std::move(compiled.cubin);
    }
    auto entry = std::make_unique<Entry>();
    entry->kernel.name = source.name;
    if (options_.load_modules) {
        MOEJIT_CU(cuModuleLoadData(&entry->module, cubin.data()));
        CUresult r = driver().cuModuleGetFunction(&entry->kernel.function, entry->module,
                                                  source.entry.c_str());
        if (r != CUDA_SUCCESS) {
            driver().cuModuleUnload(entry->module);
            check_cuda(r, "cuModuleGetFunction");
        }
    }
    Kernel &kernel = entry->kernel;
    loaded_.emplace(source.source, std::move(entry));
    return kernel;
}

}  // namespace moejit
