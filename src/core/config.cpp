#include "core/config.hpp"

#include <strings.h>

#include <cstdlib>

#include "core/env.hpp"
#include "core/error.hpp"

namespace moejit {

std::optional<bool> parse_flag(const char *name, const char *value) {
    if (!value || !*value) return std::nullopt;
    for (const char *on : {"1", "on", "true", "yes"})
        if (::strcasecmp(value, on) == 0) return true;
    for (const char *off : {"0", "off", "false", "no"})
        if (::strcasecmp(value, off) == 0) return false;
    fail(MOEJIT_ERROR_INVALID_ARGUMENT,
         "environment variable {} is \"{}\"; expected 1, on, true or yes, 0, off, false or no "
         "(case-insensitive, no spaces), or unset",
         name, value);
}

std::optional<bool> env_flag(const char *name) { return parse_flag(name, std::getenv(name)); }

std::optional<GemmTileConfig> env_gemm_tile() {
    const char *v = std::getenv("MOEJIT_GEMM_TILE");
    if (!v || !*v) return std::nullopt;
    return parse_tile_config(v, "environment variable MOEJIT_GEMM_TILE");
}

EnvironmentConfig read_environment() {
    EnvironmentConfig c;
    c.compile = env_flag("MOEJIT_COMPILE");
    c.tune = env_flag("MOEJIT_TUNE");
    c.gather = env_flag("MOEJIT_GATHER");
    c.fuse_swiglu = env_flag("MOEJIT_FUSE_SWIGLU");
    c.gemm_tile = env_gemm_tile();
    return c;
}

}  // namespace moejit
