#include "runtime/context.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "runtime/driver.hpp"
#include "runtime/cache_paths.hpp"
#include "runtime/nvrtc_archs.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace moejit {
namespace {

// sm_XY or sm_XYa -> XY (valid_arch checked the form).
int arch_number(std::string digits) {
    digits.erase(0, 3);
    if (digits.back() == 'a') digits.pop_back();
    return std::stoi(digits);
}

}  // namespace

Context::Context(const ContextOptions &options)
    : config_(resolve_config(options.config)), log_(options.log), compile_only_(options.compile_only),
      device_ordinal_(options.device_ordinal) {
    std::string arch = options.arch ? options.arch : "";
    if (!arch.empty())
        MOEJIT_REQUIRE(valid_arch(arch), "options->arch is \"{}\", expected sm_XY or sm_XYa with XY >= 80 (e.g. sm_90a, sm_80)", arch);
    if (!arch.empty()) require_nvrtc_arch(arch);  // NVRTC's own list: a typo fails here, not in 48 compiles
    // Compute capability 9.0 always compiles for sm_90a (wgmma, setmaxnreg): its cubins run on
    // exactly the devices an sm_90 cubin runs on, and the tile heuristics may pick wgmma.
    if (arch == "sm_90") arch = "sm_90a";
    if (compile_only_) {
        MOEJIT_REQUIRE(!arch.empty(), "options->arch is NULL, but a compile-only context needs an explicit arch such as \"sm_90a\"");
    } else {
        MOEJIT_REQUIRE(device_ordinal_ >= 0, "options->device_ordinal is {}, expected >= 0", device_ordinal_);
        const DriverApi &api = driver();  // NO_DRIVER / NO_DEVICE surface here
        int count = 0;
        MOEJIT_CU(cuDeviceGetCount(&count));
        if (count == 0) fail(Status::no_device, "no CUDA device found");
        if (device_ordinal_ >= count)
            fail(Status::no_device, "options->device_ordinal is {}, but only {} CUDA device(s) exist",
                 device_ordinal_, count);
        MOEJIT_CU(cuDeviceGet(&device_, device_ordinal_));
        MOEJIT_CU(cuDeviceGetAttribute(&cc_major_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_));
        MOEJIT_CU(cuDeviceGetAttribute(&cc_minor_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_));
        MOEJIT_CU(cuDeviceGetAttribute(&sm_count_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_));
        MOEJIT_CU(cuDeviceGetAttribute(&max_shared_per_block_, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                       device_));
        if (cc_major_ < 8)
            fail(Status::unsupported, "device {} has compute capability {}.{}; moejit needs 8.0 or newer",
                 device_ordinal_, cc_major_, cc_minor_);
        // Hopper gets the arch-specific target so wgmma/setmaxnreg are available.
        const std::string own = fmt::format("sm_{}{}{}", cc_major_, cc_minor_, cc_major_ == 9 ? "a" : "");
        if (arch.empty()) arch = own;
        // A cubin loads only on its own major with a minor at most the device's (exactly the
        // device's for sm_XYa): refuse an arch whose kernels could never run here.
        const int number = arch_number(arch);
        if (number / 10 != cc_major_ || number % 10 > cc_minor_ || (arch.back() == 'a' && number % 10 != cc_minor_))
            fail(Status::unsupported,
                 "options->arch is \"{}\", but device {} has compute capability {}.{}, where its cubins do not "
                 "load; expected NULL (the device's own, {}) or an arch of that device",
                 arch, device_ordinal_, cc_major_, cc_minor_, own);
        MOEJIT_CU(cuDevicePrimaryCtxRetain(&cu_context_, device_));
        CUresult r = api.cuCtxSetCurrent(cu_context_);
        if (r != CUDA_SUCCESS) {
            api.cuDevicePrimaryCtxRelease(device_);
            check_cuda(r, "cuCtxSetCurrent");
        }
    }
    if (compile_only_) {
        // No device to ask: the tile heuristics see the compute capability the arch names.
        const int number = arch_number(arch);
        cc_major_ = number / 10;
        cc_minor_ = number % 10;
    }
    JitOptions jit;
    jit.arch = arch;
    jit.jit_enabled = config_.jit.value;
    jit.load_modules = !compile_only_;
    jit.cache_dir = versioned_cache_dir(cache_root(options.cache_dir));
    jit.prebuilt_dir = prebuilt_kernels_dir();
    jit.max_shared_per_block = max_shared_per_block_;
    jit.log = log_;
    try {
        jit_ = std::make_unique<JitEngine>(std::move(jit));
        if (!compile_only_) {
            // The device error word (device_errors()), zero until a kernel finds bad device data.
            CUdeviceptr word = 0;
            MOEJIT_CU(cuMemAlloc(&word, sizeof(std::uint32_t)));
            device_errors_ = reinterpret_cast<std::uint32_t *>(word);
            const std::uint32_t zero = 0;
            MOEJIT_CU(cuMemcpyHtoD(word, &zero, sizeof zero));
        }
    } catch (...) {
        if (device_errors_) driver().cuMemFree(reinterpret_cast<CUdeviceptr>(device_errors_));
        jit_.reset();
        if (cu_context_) driver().cuDevicePrimaryCtxRelease(device_);
        throw;
    }
}

Context::~Context() {
    jit_.reset();  // unload modules while the CUDA context still exists
    if (device_errors_) {
        try {
            make_current();
            driver().cuMemFree(reinterpret_cast<CUdeviceptr>(device_errors_));  // best effort at teardown
        } catch (...) {
        }
    }
    if (cu_context_) driver().cuDevicePrimaryCtxRelease(device_);
}

std::uint32_t Context::read_device_errors(bool clear) {
    if (compile_only_) return 0;
    make_current();
    // Every stream's work so far: the word is set by kernels on any stream of this context.
    MOEJIT_CU(cuCtxSynchronize());
    const CUdeviceptr word = reinterpret_cast<CUdeviceptr>(device_errors_);
    std::uint32_t errors = 0;
    MOEJIT_CU(cuMemcpyDtoH(&errors, word, sizeof errors));
    if (clear && errors != 0) {
        const std::uint32_t zero = 0;
        MOEJIT_CU(cuMemcpyHtoD(word, &zero, sizeof zero));
    }
    return errors;
}

void Context::make_current() {
    if (compile_only_) return;
    CUcontext current = nullptr;
    MOEJIT_CU(cuCtxGetCurrent(&current));
    if (current != cu_context_) MOEJIT_CU(cuCtxSetCurrent(cu_context_));
}

void Context::require_device(const char *what) const {
    MOEJIT_REQUIRE(!compile_only_, "{} needs a GPU, but the context is compile-only (created "
                                   "with options->compile_only = 1)", what);
}

Kernel &Context::kernel(const KernelSource &source) {
    make_current();
    return jit_->get(source);
}

namespace {

// Cores this process may run on (its affinity mask, e.g. a container's share), at least 1.
unsigned usable_cores() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
    return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

std::vector<Kernel *> Context::kernels(const std::vector<KernelSource> &sources) {
    const std::size_t n = sources.size();
    std::vector<Kernel *> out(n, nullptr);
    std::vector<std::exception_ptr> errors(n);
    std::vector<std::vector<LogBuffer::Message>> messages(n);
    // Longest first: the Hopper GEMM templates (sm90/) take 0.4-0.7 s of NVRTC each, the other
    // kernels 0.05-0.2 s (measured per kernel, PERF_LOG cold start), so starting them first
    // shortens the makespan on few cores; the order of the results is the caller's.
    std::vector<std::size_t> order(n);
    for (std::size_t i = 0; i < n; ++i) order[i] = i;
    std::stable_partition(order.begin(), order.end(),
                          [&](std::size_t i) { return sources[i].template_name.rfind("sm90/", 0) == 0; });
    std::atomic<std::size_t> next{0};
    const std::size_t workers = std::min<std::size_t>(n, usable_cores());
    // NVRTC in worker processes when this many compile at once (runtime/compile_worker.hpp): on
    // 16 cores threads of one process took 2.8x their CPU time, on 2 they did not slow each other
    // and a process start made each compile ~10 % dearer (docs/PERF_LOG.md); 4 is between the two
    // measured points.
    constexpr std::size_t kParallelCompilesForWorkers = 4;
    const CompileIn where = workers >= kParallelCompilesForWorkers ? CompileIn::worker : CompileIn::process;
    // Each worker takes the next source; a source already resolved costs one lookup.
    auto work = [&] {
        try {
            make_current();
        } catch (...) {
            return;  // another worker, or the calling thread, does the rest
        }
        for (std::size_t next_i; (next_i = next.fetch_add(1)) < n;) {
            const std::size_t i = order[next_i];
            LogBuffer buffer;
            try {
                out[i] = &jit_->get(sources[i], where);
            } catch (...) {
                errors[i] = std::current_exception();
            }
            messages[i] = buffer.take();
        }
    };
    std::vector<std::thread> threads;
    for (std::size_t w = 1; w < workers; ++w) {
        try {
            threads.emplace_back(work);
        } catch (const std::system_error &) {
            break;  // fewer threads; the calling thread works too
        }
    }
    work();
    for (std::thread &t : threads) t.join();
    for (auto &m : messages) LogBuffer::deliver(m);
    for (std::size_t i = 0; i < n; ++i) {
        if (errors[i]) std::rethrow_exception(errors[i]);
        if (!out[i]) out[i] = &kernel(sources[i]);  // only if a worker could not start
    }
    return out;
}

void Context::launch_struct(const Kernel &kernel, const LaunchShape &s, void *stream, const void *args,
                            std::size_t bytes) {
    require_device("launching a kernel");
    // The struct a launch passes must be the one the kernel was rendered for (its size is what
    // the module load checked against the driver's parameter layout).
    if (bytes != kernel.param_bytes)
        fail(Status::internal, "kernel {} takes a {}-byte argument struct, the launch passed {} bytes", kernel.name,
             kernel.param_bytes, bytes);
    // The kernel's one parameter; the driver copies it before cuLaunchKernel returns.
    void *params[] = {const_cast<void *>(args)};
    if (s.grid_x == 0 || s.grid_y == 0 || s.grid_z == 0) return;  // nothing to do (e.g. T = 0)
    make_current();
    if (static_cast<int>(s.shared_bytes) > kernel.max_dynamic_smem)
        fail(Status::unsupported, "kernel {} needs {} bytes of dynamic shared memory; the device allows {}",
             kernel.name, s.shared_bytes, kernel.max_dynamic_smem);
    CUresult r = driver().cuLaunchKernel(kernel.function, s.grid_x, s.grid_y, s.grid_z, s.block_x,
                                         s.block_y, s.block_z, s.shared_bytes,
                                         static_cast<CUstream>(stream), params, nullptr);
    if (r != CUDA_SUCCESS)
        check_cuda(r, fmt::format("cuLaunchKernel({}, grid {}x{}x{}, block {}x{}x{}, smem {})",
                                  kernel.name, s.grid_x, s.grid_y, s.grid_z, s.block_x, s.block_y,
                                  s.block_z, s.shared_bytes).c_str());
}

}  // namespace moejit
