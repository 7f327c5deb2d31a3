// NVRTC in worker processes. Compiles on threads of one process slow each other down: on the
// H200's 16 cores a cold plan's 21 compiles took 2.8x their CPU time in wall time each (small
// kernels 0.08 s of CPU in 0.8 s), while 16 processes compiling side by side ran at their CPU
// time (docs/PERF_LOG.md, cold start). So when four or more compile at once (Context::kernels
// asks JitEngine::get for CompileIn::worker), each compile the engine misses runs in a child
// process, moejit-compile-worker, which reads one request on stdin and answers on stdout; the
// calling thread only waits. Without a worker executable, or when
// MOEJIT_COMPILE_WORKERS=threads, compiles stay in the process as before.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "runtime/kernel_source.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace moejit {

// The worker executable for this library: $MOEJIT_COMPILE_WORKER, else moejit-compile-worker
// next to libmoejit.so, in ../src (the build tree) or ../libexec/moejit, ../../libexec/moejit
// (an installed prefix); "" when compiles stay in the process (MOEJIT_COMPILE_WORKERS=threads,
// or none was found). Looked up once per process. A worker of another library version refuses
// the request (exit 2), which the caller reports.
const std::string &compile_worker_path();

// nvrtc_compile in a worker process: the same cubin, lowered name and log. std::nullopt when
// no worker could be started (the caller compiles in the process instead); throws
// Status::compile with NVRTC's log for a source that does not compile, and Status::internal
// naming the worker when it dies or answers garbage.
std::optional<CompiledKernel> compile_in_worker(const KernelSource &source, const std::string &arch,
                                                const std::vector<std::string> &options);

// The worker's side: one request from `in`, nvrtc_compile, the answer to `out`. Returns the
// process exit code (0 answered, also for a source that did not compile; 2 a bad request).
int compile_worker_main(std::FILE *in, std::FILE *out);

}  // namespace moejit
