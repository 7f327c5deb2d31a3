// The behaviour switches, as data: a context's configuration is resolved once, when it is
// created, from its options (moejit_context_options_t), then the environment, then the built-in
// defaults, in that order of precedence, and never changes. This file's .cpp is the only reader
// of the MOEJIT_* variables below; everything else asks the context (Context::config()).
//
//   option             variable            default
//   jit_mode           MOEJIT_COMPILE      on            compile on a cache miss (off: JIT_DISABLED)
//   tune               MOEJIT_TUNE         off           time candidate tiles (off with a forced tile)
//   gather             MOEJIT_GATHER       the rule      fc1 gathers x's rows (layer_specs: I <= 2048
//                                                        on the wgmma engine)
//   fuse_swiglu        MOEJIT_FUSE_SWIGLU  off           SwiGLU in fc1's epilogue
//   gemm_tile          MOEJIT_GEMM_TILE    heuristic     force one grouped-GEMM tile (syntax checked
//                                                        here; whether it fits a problem, when a
//                                                        plan or GEMM picks its tile)
//   cache_dir          MOEJIT_CACHE_DIR    (cache_paths) read by jit/cache_paths.cpp
//   -                  MOEJIT_LIBCUDA      libcuda.so.1  read by driver/driver.cpp
//
// Strict: every variable is parsed when a context is created, whether or not an option
// overrides it, and a value that is not one of the accepted spellings is an error
// (MOEJIT_ERROR_INVALID_ARGUMENT naming the variable, the value and what is accepted), never
// silently the default. Unset or empty means "not set". Flags accept 1/on/true/yes and
// 0/off/false/no, case-insensitive, nothing else. An option out of range is
// MOEJIT_ERROR_INVALID_ARGUMENT naming the field (options->tune, ...).
#pragma once

#include <optional>
#include <string>

#include "dispatch/tile_config.hpp"
#include "moejit.h"

namespace moejit {

// Where a setting's value came from (moejit_plan_describe's *_from keys).
enum class ConfigSource { built_in, environment, option };
const char *source_name(ConfigSource source);  // "default", "environment", "option"

template <class T> struct Setting {
    T value{};
    ConfigSource from = ConfigSource::built_in;
};

// A context's resolved configuration. Default-constructed: the built-in defaults (what a
// context gets with no option and no variable set); tests construct it directly.
struct Config {
    Setting<bool> jit{true};
    Setting<bool> tune{false};
    Setting<std::optional<bool>> gather;  // nullopt: the rule (layer_specs)
    Setting<bool> fuse_swiglu{false};
    Setting<std::optional<ForcedTile>> gemm_tile;  // nullopt: the heuristic

    // Tuning runs when asked for and no tile is forced.
    bool tuning() const { return tune.value && !gemm_tile.value; }
    const ForcedTile *forced_tile() const { return gemm_tile.value ? &*gemm_tile.value : nullptr; }
};

// The MOEJIT_* variables above, each parsed (nullopt: unset or empty).
struct EnvironmentConfig {
    std::optional<bool> compile, tune, gather, fuse_swiglu;
    std::optional<GemmTileConfig> gemm_tile;
};

// Reads and validates every variable above now (not cached). Throws on the first bad value.
EnvironmentConfig read_environment();

// `options` (validated: each switch, jit_mode and gemm_tile, naming the field), over the
// environment (read_environment), over the defaults. Throws on the first bad option or variable.
Config resolve_config(const moejit_context_options_t &options);

// Strict flag parse of `value` for variable `name` (nullptr or "" -> nullopt).
std::optional<bool> parse_flag(const char *name, const char *value);

}  // namespace moejit
