#include "runtime/config.hpp"

#include <strings.h>

#include <cstdlib>

#include "base/error.hpp"

namespace moejit {
namespace {

constexpr const char *kTileVariable = "environment variable MOEJIT_GEMM_TILE";
constexpr const char *kTileOption = "options->gemm_tile";

std::optional<bool> env_flag(const char *name) { return parse_flag(name, std::getenv(name)); }

std::optional<std::string> env_gemm_tile() {
    const char *v = std::getenv("MOEJIT_GEMM_TILE");
    if (!v || !*v) return std::nullopt;
    return std::string(v);
}

// options-><field>: nullopt when not set (Switch::from_env).
std::optional<bool> option_switch(Switch value, const char *field, const char *variable,
                                  const char *fallback) {
    switch (value) {
    case Switch::from_env: return std::nullopt;
    case Switch::on: return true;
    case Switch::off: return false;
    }
    fail(Status::invalid_argument,
         "options->{} is {}, expected MOEJIT_SWITCH_FROM_ENV (0: {}, else {}), MOEJIT_SWITCH_ON (1) or "
         "MOEJIT_SWITCH_OFF (2)",
         field, static_cast<int>(value), variable, fallback);
}

// The option if set, else the variable if set, else the default already in `setting`.
void resolve(Setting<bool> &setting, std::optional<bool> option, std::optional<bool> env) {
    if (option) setting = {*option, ConfigSource::option};
    else if (env) setting = {*env, ConfigSource::environment};
}

}  // namespace

const char *source_name(ConfigSource source) {
    switch (source) {
    case ConfigSource::option: return "option";
    case ConfigSource::environment: return "environment";
    case ConfigSource::built_in: break;
    }
    return "default";
}

std::optional<bool> parse_flag(const char *name, const char *value) {
    if (!value || !*value) return std::nullopt;
    for (const char *on : {"1", "on", "true", "yes"})
        if (::strcasecmp(value, on) == 0) return true;
    for (const char *off : {"0", "off", "false", "no"})
        if (::strcasecmp(value, off) == 0) return false;
    fail(Status::invalid_argument,
         "environment variable {} is \"{}\"; expected 1, on, true or yes, 0, off, false or no "
         "(case-insensitive, no spaces), or unset",
         name, value);
}

namespace {
std::optional<std::string> env_text(const char *name) {
    const char *v = std::getenv(name);
    if (!v || !*v) return std::nullopt;
    return std::string(v);
}
}  // namespace

std::optional<std::string> env_libcuda_path() { return env_text("MOEJIT_LIBCUDA"); }
std::optional<std::string> env_nvrtc_path() { return env_text("MOEJIT_NVRTC"); }
std::optional<std::string> env_compile_worker() { return env_text("MOEJIT_COMPILE_WORKER"); }

bool env_compile_in_processes() {
    const std::optional<std::string> v = env_text("MOEJIT_COMPILE_WORKERS");
    if (!v || *v == "processes") return true;
    if (*v == "threads") return false;
    fail(Status::invalid_argument, "MOEJIT_COMPILE_WORKERS is '{}': expected 'processes' or 'threads'", *v);
}

std::vector<std::string> env_cuda_roots() {
    std::vector<std::string> roots;
    for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
        if (auto v = env_text(var)) roots.push_back(*v);
    return roots;
}

std::string env_cache_root() {
    if (const char *dir = std::getenv("MOEJIT_CACHE_DIR")) return dir;
    if (auto xdg = env_text("XDG_CACHE_HOME")) return *xdg + "/moejit";
    if (auto home = env_text("HOME")) return *home + "/.cache/moejit";
    return "";
}

EnvironmentConfig read_environment() {
    env_compile_in_processes();  // strict: a bad value is an error when a context is created
    EnvironmentConfig c;
    c.compile = env_flag("MOEJIT_COMPILE");
    c.tune = env_flag("MOEJIT_TUNE");
    c.gather = env_flag("MOEJIT_GATHER");
    c.fuse_swiglu = env_flag("MOEJIT_FUSE_SWIGLU");
    c.store_ring = env_flag("MOEJIT_STORE_RING");
    c.gemm_tile = env_gemm_tile();
    return c;
}

Config resolve_config(const ConfigOptions &o) {
    // The options first (a bad field is named before the environment is looked at), then every
    // variable, set option or not: a typo in the environment fails wherever it is.
    MOEJIT_REQUIRE(o.jit_mode >= JitMode::from_env && o.jit_mode <= JitMode::off,
                   "options->jit_mode is {}, expected 0 (from env), 1 (on) or 2 (off)", static_cast<int>(o.jit_mode));
    std::optional<bool> jit;
    if (o.jit_mode != JitMode::from_env) jit = o.jit_mode == JitMode::on;
    const std::optional<bool> tune = option_switch(o.tune, "tune", "$MOEJIT_TUNE", "off");
    const std::optional<bool> gather =
        option_switch(o.gather, "gather", "$MOEJIT_GATHER", "on where I <= 2048 on the wgmma engine");
    const std::optional<bool> fuse = option_switch(o.fuse_swiglu, "fuse_swiglu", "$MOEJIT_FUSE_SWIGLU", "off");
    // NULL: not set; "": the heuristic, explicitly (over MOEJIT_GEMM_TILE).
    std::optional<std::optional<ForcedTileText>> tile;
    if (o.gemm_tile) {
        if (*o.gemm_tile) tile = ForcedTileText{o.gemm_tile, kTileOption};
        else tile = std::optional<ForcedTileText>{};
    }
    const EnvironmentConfig env = read_environment();

    Config c;
    resolve(c.jit, jit, env.compile);
    resolve(c.tune, tune, env.tune);
    if (gather) c.gather = {*gather, ConfigSource::option};
    else if (env.gather) c.gather = {*env.gather, ConfigSource::environment};
    resolve(c.fuse_swiglu, fuse, env.fuse_swiglu);
    resolve(c.store_ring, std::nullopt, env.store_ring);
    if (tile) c.gemm_tile = {*tile, ConfigSource::option};
    else if (env.gemm_tile) c.gemm_tile = {ForcedTileText{*env.gemm_tile, kTileVariable}, ConfigSource::environment};
    return c;
}

}  // namespace moejit
