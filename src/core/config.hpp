// Every MOEJIT_* environment variable the library reads, parsed strictly in one place. A value
// that is not one of the accepted spellings is an error (MOEJIT_ERROR_INVALID_ARGUMENT naming
// the variable, the value and what is accepted), never silently the default: read_environment()
// runs when a context is created, so a typo fails there, before any work. Unset or empty means
// "not set" (the default applies) for every variable.
//
//   MOEJIT_COMPILE      flag, default on       compile on a cache miss (off: JIT_DISABLED)
//   MOEJIT_TUNE         flag, default off      time candidate tiles (ignored with a forced tile)
//   MOEJIT_GATHER       flag, default by rule  fc1 gathers x's rows
//   MOEJIT_FUSE_SWIGLU  flag, default off      SwiGLU in fc1's epilogue
//   MOEJIT_GEMM_TILE    tile text              force one grouped-GEMM tile (syntax checked here;
//                                              whether it fits a problem, when a plan or GEMM
//                                              picks its tile)
//   MOEJIT_CACHE_DIR    path (any)             cache root ("" = no disk cache; see cache_paths)
//   MOEJIT_LIBCUDA      path (any)             libcuda to dlopen (read by driver.cpp)
// Flags accept 1/on/true/yes and 0/off/false/no, case-insensitive, nothing else.
#pragma once

#include <optional>
#include <string>

#include "dispatch/tile_config.hpp"

namespace moejit {

struct EnvironmentConfig {
    std::optional<bool> compile, tune, gather, fuse_swiglu;
    std::optional<GemmTileConfig> gemm_tile;
};

// Reads and validates every variable above now (not cached: the environment is read when a
// context is created, as documented). Throws on the first bad value.
EnvironmentConfig read_environment();

// Strict flag parse of `value` for variable `name` (nullptr or "" -> nullopt).
std::optional<bool> parse_flag(const char *name, const char *value);

// MOEJIT_GEMM_TILE parsed (nullopt when unset or empty); throws on bad syntax.
std::optional<GemmTileConfig> env_gemm_tile();

}  // namespace moejit
