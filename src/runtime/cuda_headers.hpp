// The CUDA toolkit headers NVRTC compiles the kernels against are part of the cache key: two
// processes with different toolkits ($CUDA_HOME / $CUDA_PATH pick them, see
// cuda_include_dir()) but the same NVRTC must not share entries.
#pragma once

#include <string>
#include <vector>

namespace moejit {

// SHA-256 (hex) over the include folder's path and the name and bytes of every toolkit header
// the embedded templates include, transitively: each `#include` of a template that is not an
// embedded template, then each `#include "x"` / `<x>` inside those headers, resolved against the
// including header's folder and then the include folder (NVRTC's -I); names that resolve to no
// file there (NVRTC's built-in standard headers) are recorded as absent. Conditional includes
// are all followed (an over-approximation: more headers hashed, never fewer). Computed once per
// process (thread-safe). "no-cuda-include-dir" when no toolkit headers were found.
const std::string &cuda_headers_digest();

// The files cuda_headers_digest() covered, for tests and diagnostics.
const std::vector<std::string> &cuda_headers_hashed();

}  // namespace moejit
