// C++ RAII wrappers over the moejit C ABI (header-only; uses only moejit.h). They live in
// moejit::api so they never clash with the library's internal moejit:: classes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "moejit.h"

namespace moejit::api {

// A failed C call, with its status and the library's message.
class Exception : public std::runtime_error {
public:
    Exception(moejit_status_t status, const std::string &message)
        : std::runtime_error(std::string(moejit_status_string(status)) + ": " + message),
          status_(status) {}
    moejit_status_t status() const noexcept { return status_; }

private:
    moejit_status_t status_;
};

inline void check(moejit_status_t status) {
    if (status != MOEJIT_SUCCESS) throw Exception(status, moejit_last_error());
}

// "bf16", "fp16", "fp32", "int32", "int64", or "unknown": the names the library's messages and
// cache keys use (src/base/dtype.hpp has the library's table; capi/capi_convert.cpp asserts
// that the two agree, which is why this is constexpr).
constexpr const char *dtype_name(moejit_dtype_t dtype) noexcept {
    switch (dtype) {
    case MOEJIT_DTYPE_BF16: return "bf16";
    case MOEJIT_DTYPE_FP16: return "fp16";
    case MOEJIT_DTYPE_FP32: return "fp32";
    case MOEJIT_DTYPE_INT32: return "int32";
    case MOEJIT_DTYPE_INT64: return "int64";
    }
    return "unknown";
}

struct ContextDeleter {
    void operator()(moejit_context_t c) const noexcept { moejit_context_destroy(c); }
};
struct PlanDeleter {
    void operator()(moejit_plan_t p) const noexcept { moejit_plan_destroy(p); }
};

// moejit_context_options_t as C++ values. Every field left as it is keeps the C default: a
// switch left at std::nullopt takes its MOEJIT_* environment variable, else the library's
// default (moejit.h, "configuration": an option beats the environment, which beats the default).
struct ContextOptions {
    std::optional<std::string> cache_dir;  // nullopt: $MOEJIT_CACHE_DIR, ...; "": memory only
    std::optional<std::string> arch;       // nullopt: the device's own
    int device_ordinal = 0;
    moejit_jit_mode_t jit_mode = MOEJIT_JIT_FROM_ENV;
    bool compile_only = false;
    moejit_log_fn log_fn = nullptr;
    void *log_user_data = nullptr;
    // Since 0.6.
    std::optional<bool> tune;         // MOEJIT_TUNE
    std::optional<bool> gather;       // MOEJIT_GATHER
    std::optional<bool> fuse_swiglu;  // MOEJIT_FUSE_SWIGLU
    std::optional<std::string> gemm_tile;  // MOEJIT_GEMM_TILE; "": the heuristic over it

    // The C struct; its strings point into this object (valid while it lives, unchanged).
    moejit_context_options_t c_options() const {
        moejit_context_options_t o;
        check(moejit_context_options_init(&o));
        auto text = [](const std::optional<std::string> &s) { return s ? s->c_str() : nullptr; };
        auto flag = [](const std::optional<bool> &b) -> std::int32_t {
            return b ? (*b ? MOEJIT_SWITCH_ON : MOEJIT_SWITCH_OFF) : MOEJIT_SWITCH_FROM_ENV;
        };
        o.cache_dir = text(cache_dir);
        o.arch = text(arch);
        o.device_ordinal = device_ordinal;
        o.jit_mode = jit_mode;
        o.compile_only = compile_only ? 1 : 0;
        o.log_fn = log_fn;
        o.log_user_data = log_user_data;
        o.tune = flag(tune);
        o.gather = flag(gather);
        o.fuse_swiglu = flag(fuse_swiglu);
        o.gemm_tile = text(gemm_tile);
        return o;
    }
};

namespace detail {
// A moejit_plan_describe-style call (buf, size, required) as a string.
template <class F> std::string describe(F &&call) {
    std::size_t need = 0;
    check(call(nullptr, 0, &need));
    std::string text(need, '\0');
    check(call(text.data(), text.size(), &need));
    text.resize(need > 0 ? need - 1 : 0);
    return text;
}
}  // namespace detail

class Context {
public:
    explicit Context(const moejit_context_options_t *options = nullptr) {
        moejit_context_t raw = nullptr;
        check(moejit_context_create(options, &raw));
        handle_.reset(raw);
    }
    explicit Context(const ContextOptions &options) {
        const moejit_context_options_t o = options.c_options();
        moejit_context_t raw = nullptr;
        check(moejit_context_create(&o, &raw));
        handle_.reset(raw);
    }
    moejit_context_t get() const noexcept { return handle_.get(); }
    // What a plan of `desc` would resolve on this context (moejit_plan_describe_desc's text).
    std::string describe_plan(const moejit_plan_desc_t &desc) const {
        return detail::describe([&](char *buf, std::size_t size, std::size_t *need) {
            return moejit_plan_describe_desc(get(), &desc, buf, size, need);
        });
    }
    std::string arch() const {
        const char *a = nullptr;
        check(moejit_context_arch(get(), &a));
        return a;
    }
    moejit_cache_stats_t cache_stats() const {
        moejit_cache_stats_t s;
        check(moejit_cache_stats_init(&s));
        check(moejit_context_cache_stats(get(), &s));
        return s;
    }

private:
    std::unique_ptr<moejit_context_s, ContextDeleter> handle_;
};

class Plan {
public:
    Plan(const Context &context, const moejit_plan_desc_t &desc) {
        moejit_plan_t raw = nullptr;
        check(moejit_plan_create(context.get(), &desc, &raw));
        handle_.reset(raw);
    }
    moejit_plan_t get() const noexcept { return handle_.get(); }
    // The configuration this plan resolved (moejit_plan_describe's text).
    std::string describe() const {
        return detail::describe([&](char *buf, std::size_t size, std::size_t *need) {
            return moejit_plan_describe(get(), buf, size, need);
        });
    }
    std::size_t saved_size(std::int64_t tokens) const { return size(moejit_plan_saved_size, tokens); }
    std::size_t workspace_size(std::int64_t tokens) const { return size(moejit_plan_workspace_size, tokens); }
    void forward(const moejit_forward_args_t &args) const { check(moejit_plan_forward(get(), &args)); }
    void backward(const moejit_backward_args_t &args) const { check(moejit_plan_backward(get(), &args)); }

    // The pre-dispatched experts entry (since 0.6): rows already grouped by expert, sizes by R.
    std::size_t experts_saved_size(std::int64_t rows) const { return size(moejit_plan_experts_saved_size, rows); }
    std::size_t experts_workspace_size(std::int64_t rows) const {
        return size(moejit_plan_experts_workspace_size, rows);
    }
    void experts_forward(const moejit_experts_forward_args_t &args) const {
        check(moejit_plan_experts_forward(get(), &args));
    }
    void experts_backward(const moejit_experts_backward_args_t &args) const {
        check(moejit_plan_experts_backward(get(), &args));
    }

private:
    // One of the plan's size queries (T or R) through check().
    std::size_t size(moejit_status_t (*query)(moejit_plan_t, std::int64_t, std::size_t *), std::int64_t n) const {
        std::size_t b = 0;
        check(query(get(), n, &b));
        return b;
    }
    std::unique_ptr<moejit_plan_s, PlanDeleter> handle_;
};

}  // namespace moejit::api
