// Prints the STAMP of a prebuilt-kernel tier (docs/DESIGN.md §4.10): the NVRTC version and the
// toolkit headers' digest of this build machine, which the library puts into the tier's keys
// in place of the user's. Run by packaging/make_prebuilt.py beside moejit-warmup, in the same
// environment (CUDA_HOME and the NVRTC rule pick the same NVRTC and headers for both).
// A build-time helper, not installed: it uses the library's internals (runtime/), not the C ABI.
#include <cstdio>
#include <exception>

#include "runtime/cuda_headers.hpp"
#include "runtime/nvrtc_compiler.hpp"

int main() {
    try {
        const int version = moejit::nvrtc_version();
        if (version <= 0) {
            std::fprintf(stderr, "prebuilt_stamp: NVRTC did not report its version\n");
            return 1;
        }
        std::printf("nvrtc %d\nheaders %s\n", version, moejit::cuda_headers_digest().c_str());
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "prebuilt_stamp: %s\n", e.what());
        return 1;
    }
}
