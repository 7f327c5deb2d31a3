#include "runtime/nvrtc_archs.hpp"

#include <nvrtc.h>

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "runtime/nvrtc_loader.hpp"

namespace moejit {

// Asked once NVRTC is loaded (nvrtc() throws while it cannot be: the static is then initialised
// by a later call).
const std::vector<int> &nvrtc_supported_archs() {
    static const std::vector<int> archs = [] {
        const NvrtcApi &api = nvrtc();
        std::vector<int> out;
        int count = 0;
        if (api.nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0) return out;
        out.resize(static_cast<std::size_t>(count));
        if (api.nvrtcGetSupportedArchs(out.data()) != NVRTC_SUCCESS) out.clear();
        std::sort(out.begin(), out.end());
        return out;
    }();
    return archs;
}

void require_nvrtc_arch(const std::string &arch) {
    std::string digits = arch.size() > 3 ? arch.substr(3) : "";
    if (!digits.empty() && digits.back() == 'a') digits.pop_back();
    int number = 0;
    try {
        number = std::stoi(digits);
    } catch (...) {
        fail(Status::invalid_argument, "arch \"{}\" is not of the form sm_XY or sm_XYa", arch);
    }
    const std::vector<int> *known = nullptr;
    try {
        known = &nvrtc_supported_archs();
    } catch (const Error &) {
        return;  // no NVRTC here (a warm cache needs none): a compile would say what is missing
    }
    const std::vector<int> &archs = *known;
    if (archs.empty()) return;  // NVRTC could not say: its own compile error will
    if (std::find(archs.begin(), archs.end(), number) == archs.end())
        fail(Status::invalid_argument, "arch \"{}\" is not supported by this NVRTC, which compiles for sm_{}",
             arch, fmt::join(archs, ", sm_"));
}

}  // namespace moejit
