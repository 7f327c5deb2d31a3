#include "jit/cache_paths.hpp"

#include <cstdlib>

#include "moejit_version.h"

namespace moejit {

std::string cache_root(const char *configured) {
    if (configured) return configured;
    if (const char *dir = std::getenv("MOEJIT_CACHE_DIR")) return dir;
    if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/moejit";
    if (const char *home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/moejit";
    return "";
}

std::string versioned_cache_dir(const std::string &root) {
    if (root.empty()) return root;
    return root + "/" + MOEJIT_VERSION_STRING;
}

}  // namespace moejit
