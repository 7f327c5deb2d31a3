// The archs the loaded NVRTC can compile for (nvrtcGetSupportedArchs), so that an arch NVRTC
// does not know (sm_99) is refused once, up front, instead of failing every compile.
#pragma once

#include <string>
#include <vector>

namespace moejit {

// The numbers NVRTC reports (e.g. 75, 80, ..., 90, 100, 120), ascending; computed once.
const std::vector<int> &nvrtc_supported_archs();

// Throws Status::invalid_argument naming `arch` and the supported list when NVRTC cannot
// compile for `arch` ("sm_XY" / "sm_XYa", already checked by valid_arch()).
void require_nvrtc_arch(const std::string &arch);

}  // namespace moejit
