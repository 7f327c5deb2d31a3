#include "runtime/jit_engine.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <mutex>

#include "base/error.hpp"
#include "runtime/driver.hpp"
#include "runtime/cuda_headers.hpp"  // cache-key line below (issue 16)
#include "runtime/compile_worker.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/nvrtc_loader.hpp"
#include "runtime/templates.hpp"
#include "moejit_version.h"

namespace moejit {

std::optional<std::string> param_layout_mismatch(const std::string &kernel, std::size_t expected,
                                                 const ParamLayout &found) {
    if (!found.checked) return std::nullopt;
    // The offset is where the driver places the parameter in the kernel's parameter space: past
    // its fixed prefix, padded to the struct's alignment (48 for a 64-byte aligned struct on
    // sm_90a), so only the count and the size describe the struct.
    if (found.count == 1 && found.size == expected) return std::nullopt;
    if (found.count != 1)
        return fmt::format("kernel {} has {} parameters, expected exactly one (its {}-byte argument struct)", kernel,
                           found.count >= 2 ? "two or more" : "no", expected);
    return fmt::format("kernel {}'s parameter is {} bytes, expected {} (the argument struct of "
                       "templates/kernel_args.h differs between host and device)",
                       kernel, found.size, expected);
}

namespace {

// The loaded kernel's parameters as the driver reports them; a driver without
// cuFuncGetParamInfo (before CUDA 12.4) leaves the layout unchecked, said once at debug level.
CUresult read_param_layout(CUfunction function, ParamLayout &layout, const Logger &log) {
    const DriverApi &api = driver();
    if (!api.cuFuncGetParamInfo) {
        static std::once_flag said;
        std::call_once(said, [&] {
            log(LogLevel::debug,
                "moejit: the CUDA driver lacks cuFuncGetParamInfo (CUDA 12.4); kernel parameter layouts are not checked");
        });
        return CUDA_SUCCESS;
    }
    layout.checked = true;
    // Every kernel takes exactly one parameter, its argument struct (templates/kernel_args.h):
    // only index 0 exists, so only index 0 is asked. Asking past the last parameter fails with
    // CUDA_ERROR_INVALID_VALUE, which compute-sanitizer reports as an API error on every load
    // (issue 29 item 3). What is checked: parameter 0 exists and has the struct's size.
    std::size_t offset = 0, size = 0;
    const CUresult r = api.cuFuncGetParamInfo(function, 0, &offset, &size);
    if (r == CUDA_ERROR_INVALID_VALUE) return CUDA_SUCCESS;  // no parameter at all: count 0
    if (r != CUDA_SUCCESS) return r;
    layout.offset = offset;
    layout.size = size;
    layout.count = 1;
    return CUDA_SUCCESS;
}

// CPU time of the calling thread (NVRTC compiles on the thread that asks), in seconds.
double thread_cpu_seconds() {
    timespec t{};
    if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return 0;
    return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

namespace {

// The prebuilt tier's STAMP: "nvrtc <major*100+minor>" and "headers <hex digest>" lines, written
// by packaging/make_prebuilt.py from packaging/prebuilt_stamp.cpp. false when unreadable.
bool read_prebuilt_stamp(const std::string &folder, std::string &nvrtc_version, std::string &headers) {
    std::ifstream in(folder + "/STAMP");
    std::string word, value;
    while (in >> word >> value) {
        if (word == "nvrtc") nvrtc_version = value;
        else if (word == "headers") headers = value;
    }
    return !nvrtc_version.empty() && !headers.empty();
}

}  // namespace

JitEngine::JitEngine(JitOptions options)
    : options_(std::move(options)), options_sorted_(default_nvrtc_options()) {
    std::sort(options_sorted_.begin(), options_sorted_.end());
    disk_ = std::make_unique<DiskCache>(options_.cache_dir, options_.log);
    if (!options_.prebuilt_dir.empty()) {
        if (read_prebuilt_stamp(options_.prebuilt_dir, prebuilt_nvrtc_, prebuilt_headers_))
            prebuilt_ = std::make_unique<DiskCache>(options_.prebuilt_dir, options_.log, DiskCache::Shipped{});
        else
            warn_once(options_.log, "prebuilt-stamp:" + options_.prebuilt_dir,
                      fmt::format("moejit: prebuilt kernels in {} are not used: no readable STAMP file",
                                  options_.prebuilt_dir));
    }
}

JitEngine::~JitEngine() {
    if (!options_.load_modules) return;
    for (auto &[source, slot] : slots_)
        if (slot->module) driver().cuModuleUnload(slot->module);  // best effort at teardown
}

const std::string &JitEngine::cache_dir() const {
    static const std::string none;
    return disk_->usable() ? disk_->folder() : none;
}

Digest JitEngine::key(const KernelSource &source) const {
    const std::string version = std::to_string(nvrtc_version());
    // Another NVRTC in the process (PyTorch's) does not change the rule's choice; say so once.
    if (const std::string &other = nvrtc().other_loaded; !other.empty())
        warn_once(options_.log, "nvrtc-other-loaded", other);
    return key_with(source, version, cuda_headers_digest());
}

Digest JitEngine::key_with(const KernelSource &source, const std::string &nvrtc_version_text,
                           const std::string &headers_digest) const {
    // Canonical, length-prefixed record (docs/DESIGN.md §4). Any field change changes the key.
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
    h.field(nvrtc_version_text);
    h.field(headers_digest);  // the toolkit headers NVRTC compiles against (runtime/cuda_headers.hpp)
    h.field(MOEJIT_VERSION_STRING);
    return h.finish();
}

CacheCounters JitEngine::counters() const {
    std::lock_guard lock(counters_mutex_);
    return counters_;
}

template <class F> void JitEngine::count(F &&update) {
    std::lock_guard lock(counters_mutex_);
    update(counters_);
}

JitEngine::Slot &JitEngine::slot_for(const std::string &source) {
    std::lock_guard lock(slots_mutex_);
    std::unique_ptr<Slot> &slot = slots_[source];
    if (!slot) slot = std::make_unique<Slot>();
    return *slot;
}

Kernel &JitEngine::get(const KernelSource &source, CompileIn where) {
    Slot &slot = slot_for(source.source);
    if (slot.ready.load(std::memory_order_acquire)) {
        count([](CacheCounters &c) { ++c.memory_hits; });
        return slot.kernel;
    }
    // Messages of the resolution reach the callback when `messages` goes out of scope, after
    // the once-flag is released (also when it throws).
    LogBuffer messages;
    bool resolved_here = false;
    std::call_once(slot.once, [&] {
        resolve(source, slot, where);
        resolved_here = true;
    });
    if (!resolved_here) count([](CacheCounters &c) { ++c.memory_hits; });  // another thread resolved it
    return slot.kernel;
}

void JitEngine::resolve(const KernelSource &source, Slot &slot, CompileIn where) {
    const auto resolve_start = std::chrono::steady_clock::now();
    CachedKernel entry;
    auto load_start = std::chrono::steady_clock::now();
    const char *from = "disk";
    const char *compiled_in = "-";  // where NVRTC ran: "worker" or "process" ("-": not compiled)
    // The prebuilt tier first: its key needs no NVRTC (its build's values), so a hit works
    // where no NVRTC is installed. A miss or a bad entry falls through to the user's cache.
    DiskCache::Lookup lookup = DiskCache::Lookup::miss;
    if (prebuilt_ && prebuilt_->usable()) {
        lookup = prebuilt_->load(source.name, key_with(source, prebuilt_nvrtc_, prebuilt_headers_), entry);
        if (lookup == DiskCache::Lookup::rejected) count([](CacheCounters &c) { ++c.disk_rejects; });
        if (lookup == DiskCache::Lookup::hit) from = "prebuilt";
    }
    Digest k{};
    if (lookup != DiskCache::Lookup::hit) {
        k = key(source);
        lookup = disk_->load(source.name, k, entry);
    }
    // The per-kernel breakdown of the debug line at the end (dev/gpu/cold_start.py reads it).
    double read_s = 0, compile_wall_s = 0, compile_cpu_s = 0, store_s = 0, module_load_s = 0;
    if (lookup == DiskCache::Lookup::hit) {
        const double seconds = seconds_since(load_start);
        read_s = seconds;
        count([&](CacheCounters &c) {
            ++c.disk_hits;
            c.disk_load_seconds += seconds;
        });
    } else {
        count([&](CacheCounters &c) {
            ++c.misses;
            if (lookup == DiskCache::Lookup::rejected) ++c.disk_rejects;
        });
        if (!options_.jit_enabled)
            fail(Status::jit_disabled,
                 "kernel {} ({}) for {} is not in the cache{} and JIT compilation is off "
                 "(MOEJIT_COMPILE=off or jit_mode); run moejit-warmup for this model first",
                 source.name, to_hex(k), options_.arch,
                 disk_->usable() ? " " + disk_->folder() : std::string(" (no disk cache)"));
        read_s = seconds_since(load_start);
        from = "nvrtc";
        CompiledKernel compiled;
        const double cpu_start = thread_cpu_seconds();
        const auto compile_start = std::chrono::steady_clock::now();
        try {
            // In a worker process when asked and there is one (this thread only waits), else here.
            std::optional<CompiledKernel> worked;
            if (where == CompileIn::worker) worked = compile_in_worker(source, options_.arch, options_sorted_);
            compiled = worked ? std::move(*worked) : nvrtc_compile(source, options_.arch, options_sorted_);
        } catch (const Error &) {
            count([](CacheCounters &c) { ++c.compile_failures; });
            throw;
        }
        compile_wall_s = seconds_since(compile_start);
        const bool in_worker = compiled.worker_cpu_seconds >= 0;
        compile_cpu_s = in_worker ? compiled.worker_cpu_seconds : thread_cpu_seconds() - cpu_start;
        compiled_in = in_worker ? "worker" : "process";
        count([&](CacheCounters &c) {
            ++c.compiles;
            c.compile_seconds += compiled.seconds;
        });
        if (!compiled.log.empty())
            options_.log(LogLevel::debug, fmt::format("moejit: NVRTC log for {}:\n{}", source.name, compiled.log));
        options_.log(LogLevel::info, fmt::format("moejit: compiled {} for {} in {:.3f} s",
                                                  source.name, options_.arch, compiled.seconds));
        entry.function = std::move(compiled.lowered_name);
        entry.cubin = std::move(compiled.cubin);
        const auto store_start = std::chrono::steady_clock::now();
        disk_->store(source.name, k, entry);  // the user's cache only, never the prebuilt tier
        store_s = seconds_since(store_start);
    }
    slot.kernel.name = source.name;
    slot.kernel.param_bytes = source.param_bytes;
    const auto module_start = std::chrono::steady_clock::now();
    if (options_.load_modules) {
        MOEJIT_CU(cuModuleLoadData(&slot.module, entry.cubin.data()));
        CUresult r = driver().cuModuleGetFunction(&slot.kernel.function, slot.module, entry.function.c_str());
        std::optional<std::string> bad_layout;
        if (r == CUDA_SUCCESS) {
            ParamLayout layout;
            r = read_param_layout(slot.kernel.function, layout, options_.log);
            if (r == CUDA_SUCCESS) bad_layout = param_layout_mismatch(source.name, source.param_bytes, layout);
        }
        if (r == CUDA_SUCCESS && !bad_layout && options_.max_shared_per_block > 0) {
            // Let launches use every byte the device offers beyond the kernel's static shared
            // memory, set now so that a launch never writes to the kernel (launches run on any
            // thread without a lock). The limit does not change occupancy or the carveout.
            int static_smem = 0;
            r = driver().cuFuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, slot.kernel.function);
            const int dynamic = options_.max_shared_per_block - static_smem;
            if (r == CUDA_SUCCESS && dynamic > slot.kernel.max_dynamic_smem) {
                r = driver().cuFuncSetAttribute(slot.kernel.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                dynamic);
                if (r == CUDA_SUCCESS) slot.kernel.max_dynamic_smem = dynamic;
            }
        }
        if (r != CUDA_SUCCESS || bad_layout) {
            driver().cuModuleUnload(slot.module);
            slot.module = nullptr;
            slot.kernel.function = nullptr;
            if (bad_layout) fail(Status::internal, "{}", *bad_layout);
            check_cuda(r, "loading a kernel (cuModuleGetFunction / cuFuncGetParamInfo / cuFuncGetAttribute / "
                          "cuFuncSetAttribute)");
        }
        module_load_s = seconds_since(module_start);
    }
    // One line per resolved kernel, for measuring a cold start (issue 28): where the kernel came
    // from and where its time went; compile_cpu_s is the CPU time of the compile: the worker
    // process's (compiled_in=worker, runtime/compile_worker.hpp) or the resolving thread's.
    options_.log(LogLevel::debug,
                 fmt::format("moejit: kernel timing name={} from={} total_s={:.6f} disk_read_s={:.6f} "
                             "compile_wall_s={:.6f} compile_cpu_s={:.6f} store_s={:.6f} module_load_s={:.6f} "
                             "compiled_in={}",
                             source.name, from,
                             seconds_since(resolve_start), read_s, compile_wall_s, compile_cpu_s, store_s,
                             module_load_s, compiled_in));
    slot.ready.store(true, std::memory_order_release);
}

}  // namespace moejit
