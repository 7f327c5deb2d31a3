// C entry points: status strings, last error, version, contexts and cache statistics.
#include <cstring>
#include <string>

#include "capi_convert.hpp"
#include "capi_guard.hpp"
#include "capi_handles.hpp"
#include "capi_struct.hpp"
#include "gemm/tile_config.hpp"
#include "runtime/context.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "templates/kernel_args.h"
#include "moejit.h"

namespace moejit {
namespace {
thread_local std::string last_error;
}
void set_last_error(std::string message) { last_error = std::move(message); }
void clear_last_error() { last_error.clear(); }

// Every field's default is zero (NULL cache_dir and arch, device 0, MOEJIT_JIT_FROM_ENV, and
// since 0.6 MOEJIT_SWITCH_FROM_ENV switches and a NULL gemm_tile).
void StructAbi<moejit_context_options_t>::defaults(moejit_context_options_t &) {}
void StructAbi<moejit_cache_stats_t>::defaults(moejit_cache_stats_t &) {}
}  // namespace moejit

using namespace moejit;

// The configuration keeps a forced tile as text; the GEMM code parses it, here once, so a bad
// spelling fails at creation as it always has.
moejit_context_s::moejit_context_s(const moejit_context_options_t &options) : impl(to_internal(options, log)) {
    moejit::check_forced_tiles(impl.config());
}

extern "C" {

MOEJIT_API const char *moejit_status_string(moejit_status_t status) {
    switch (status) {
    case MOEJIT_SUCCESS: return "MOEJIT_SUCCESS";
    case MOEJIT_ERROR_INVALID_ARGUMENT: return "MOEJIT_ERROR_INVALID_ARGUMENT";
    case MOEJIT_ERROR_UNSUPPORTED: return "MOEJIT_ERROR_UNSUPPORTED";
    case MOEJIT_ERROR_OUT_OF_MEMORY: return "MOEJIT_ERROR_OUT_OF_MEMORY";
    case MOEJIT_ERROR_NO_DRIVER: return "MOEJIT_ERROR_NO_DRIVER";
    case MOEJIT_ERROR_NO_DEVICE: return "MOEJIT_ERROR_NO_DEVICE";
    case MOEJIT_ERROR_CUDA: return "MOEJIT_ERROR_CUDA";
    case MOEJIT_ERROR_COMPILE: return "MOEJIT_ERROR_COMPILE";
    case MOEJIT_ERROR_JIT_DISABLED: return "MOEJIT_ERROR_JIT_DISABLED";
    case MOEJIT_ERROR_CACHE: return "MOEJIT_ERROR_CACHE";
    case MOEJIT_ERROR_INTERNAL: return "MOEJIT_ERROR_INTERNAL";
    }
    return "unknown status";
}

MOEJIT_API const char *moejit_last_error(void) { return last_error.c_str(); }

MOEJIT_API const char *moejit_version(void) { return MOEJIT_VERSION_STRING; }

MOEJIT_API int moejit_version_number(void) {
    return MOEJIT_VERSION_MAJOR * 10000 + MOEJIT_VERSION_MINOR * 100 + MOEJIT_VERSION_PATCH;
}

MOEJIT_API moejit_status_t moejit_context_options_init_sized(moejit_context_options_t *options,
                                                             size_t struct_size) {
    return capi_guard([&] { init_struct(options, struct_size, "options"); });
}

MOEJIT_API moejit_status_t(moejit_context_options_init)(moejit_context_options_t *options) {
    return capi_guard([&] { init_struct(options, kLegacyInitSize<moejit_context_options_t>, "options"); });
}

MOEJIT_API moejit_status_t moejit_context_create(const moejit_context_options_t *options,
                                                 moejit_context_t *context) {
    return capi_guard([&] {
        MOEJIT_REQUIRE(context, "context (the out-pointer) is NULL");
        *context = nullptr;
        moejit_context_options_t o;
        if (options) {
            o = read_struct(options, "options");
        } else {
            init_struct(&o, sizeof o, "options");
        }
        *context = new moejit_context_s(o);
    });
}

MOEJIT_API void moejit_context_destroy(moejit_context_t context) { delete context; }

MOEJIT_API moejit_status_t moejit_context_arch(moejit_context_t context, const char **arch) {
    return capi_guard([&] {
        Context &ctx = require_handle(context, "context").impl;
        MOEJIT_REQUIRE(arch, "arch (the out-pointer) is NULL");
        *arch = ctx.arch().c_str();
    });
}

MOEJIT_API moejit_status_t moejit_context_cache_dir(moejit_context_t context, const char **dir) {
    return capi_guard([&] {
        Context &ctx = require_handle(context, "context").impl;
        MOEJIT_REQUIRE(dir, "dir (the out-pointer) is NULL");
        *dir = ctx.jit().cache_dir().c_str();
    });
}

MOEJIT_API moejit_status_t moejit_cache_stats_init_sized(moejit_cache_stats_t *stats, size_t struct_size) {
    return capi_guard([&] { init_struct(stats, struct_size, "stats"); });
}

MOEJIT_API moejit_status_t(moejit_cache_stats_init)(moejit_cache_stats_t *stats) {
    return capi_guard([&] { init_struct(stats, kLegacyInitSize<moejit_cache_stats_t>, "stats"); });
}

MOEJIT_API moejit_status_t moejit_context_cache_stats(moejit_context_t context,
                                                      moejit_cache_stats_t *stats) {
    return capi_guard([&] {
        Context &ctx = require_handle(context, "context").impl;
        MOEJIT_REQUIRE(stats, "stats is NULL");
        write_struct(stats, to_c(ctx.jit().counters()), "stats");
    });
}

MOEJIT_API moejit_status_t moejit_context_device_errors(moejit_context_t context, int clear, uint32_t *errors) {
    static_assert(MOEJIT_DEVICE_ERROR_EXPERT_OFFSETS == kargs::kDeviceErrorExpertOffsets);
    return capi_guard([&] {
        Context &ctx = require_handle(context, "context").impl;
        MOEJIT_REQUIRE(errors, "errors (the out-pointer) is NULL");
        *errors = 0;
        *errors = ctx.read_device_errors(clear != 0);
    });
}

MOEJIT_API moejit_status_t moejit_nvrtc_version(int *version) {
    return capi_guard([&] {
        MOEJIT_REQUIRE(version, "version is NULL");
        *version = nvrtc_version();
    });
}

}  // extern "C"
