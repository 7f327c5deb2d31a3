// The behaviour switches, as data: a context's configuration is resolved once, when it is
// created, from its options (ConfigOptions), then the environment, then the built-in
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
//   cache_dir          MOEJIT_CACHE_DIR    (cache_root)  the disk cache's root (runtime/cache_paths.cpp)
//   (environment only) MOEJIT_STORE_RING   off           the layer's cooperative TMA-store tiles
//                                                        store C through the store ring, with the
//                                                        deeper operand ring it leaves room for,
//                                                        with enough rows per expert; opt-in while
//                                                        that rule is unmeasured (layer_specs;
//                                                        docs/DECISIONS.md "The store ring")
//
// Process-wide (read when first needed, not per context; each through a function below):
//   MOEJIT_LIBCUDA      libcuda.so.1   the driver library (runtime/driver.cpp)
//   MOEJIT_NVRTC        (the search)   the NVRTC library (runtime/nvrtc_loader.cpp)
//   MOEJIT_COMPILE_WORKERS  processes  where NVRTC runs: worker processes, or threads of this
//                                      process (runtime/compile_worker.cpp)
//   MOEJIT_COMPILE_WORKER   (the search)  the worker executable (moejit-compile-worker)
//   CUDA_HOME, CUDA_PATH               toolkit roots for NVRTC and its headers
//   XDG_CACHE_HOME, HOME               the default cache root
//
// Strict: every variable is parsed when a context is created, whether or not an option
// overrides it, and a value that is not one of the accepted spellings is an error
// (Status::invalid_argument naming the variable, the value and what is accepted), never
// silently the default. Unset or empty means "not set". Flags accept 1/on/true/yes and
// 0/off/false/no, case-insensitive, nothing else. An option out of range is
// Status::invalid_argument naming the field (options->tune, ...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>


namespace moejit {

// The values of both are moejit_jit_mode_t's and moejit_switch_t's (capi/capi_convert.cpp
// asserts each one). A C caller may pass any value: resolve_config rejects the others.
enum class JitMode : std::int32_t { from_env = 0, on = 1, off = 2 };
enum class Switch : std::int32_t { from_env = 0, on = 1, off = 2 };

// The context options that are configuration (moejit_context_options_t's fields of the same
// names). from_env and a null gemm_tile mean "not set": the variable, else the default.
struct ConfigOptions {
    JitMode jit_mode = JitMode::from_env;
    Switch tune = Switch::from_env;
    Switch gather = Switch::from_env;
    Switch fuse_swiglu = Switch::from_env;
    const char *gemm_tile = nullptr;  // "": the heuristic, whatever MOEJIT_GEMM_TILE says
};

// Where a setting's value came from (moejit_plan_describe's *_from keys).
enum class ConfigSource { built_in, environment, option };
const char *source_name(ConfigSource source);  // "default", "environment", "option"

// A tile forced on every grouped GEMM, as the text the user gave and where it came from
// ("options->gemm_tile", "environment variable MOEJIT_GEMM_TILE"). The configuration does not
// know tiles: the GEMM code parses it (gemm/tile_config.hpp, forced_tile), and the C entry
// that creates a context checks it there, so a bad tile still fails at creation.
struct ForcedTileText {
    std::string text;
    std::string origin;
};

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
    Setting<std::optional<ForcedTileText>> gemm_tile;  // nullopt: the heuristic
    Setting<bool> store_ring{false};                   // MOEJIT_STORE_RING (no option field)

    // Tuning runs when asked for and no tile is forced.
    bool tuning() const { return tune.value && !gemm_tile.value; }
};

// The MOEJIT_* variables above, each parsed (nullopt: unset or empty).
struct EnvironmentConfig {
    std::optional<bool> compile, tune, gather, fuse_swiglu, store_ring;
    std::optional<std::string> gemm_tile;
};

// Reads and validates every variable above now (not cached). Throws on the first bad value.
EnvironmentConfig read_environment();

// `options` (validated: each switch, jit_mode and gemm_tile, naming the field), over the
// environment (read_environment), over the defaults. Throws on the first bad option or variable.
Config resolve_config(const ConfigOptions &options);

// The process-wide variables above. Unset or empty -> nullopt (MOEJIT_CACHE_DIR: set but empty
// is "", meaning no disk cache).
std::optional<std::string> env_libcuda_path();  // MOEJIT_LIBCUDA
std::optional<std::string> env_nvrtc_path();    // MOEJIT_NVRTC
// MOEJIT_COMPILE_WORKERS: true "processes" (or unset), false "threads"; anything else is
// Status::invalid_argument naming the variable and both spellings.
bool env_compile_in_processes();
std::optional<std::string> env_compile_worker();  // MOEJIT_COMPILE_WORKER
std::vector<std::string> env_cuda_roots();      // $CUDA_HOME, $CUDA_PATH, in that order, set ones
std::string env_cache_root();                   // $MOEJIT_CACHE_DIR, $XDG_CACHE_HOME/moejit, ~/.cache/moejit or ""

// Strict flag parse of `value` for variable `name` (nullptr or "" -> nullopt).
std::optional<bool> parse_flag(const char *name, const char *value);

}  // namespace moejit
