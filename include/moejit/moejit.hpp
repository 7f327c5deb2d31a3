// C++ RAII wrappers over the moejit C ABI (header-only; uses only moejit.h). They live in
// moejit::api so they never clash with the library's internal moejit:: classes.
#pragma once

#include <memory>
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
// cache keys use (src/core/dtype.cpp returns these too).
inline const char *dtype_name(moejit_dtype_t dtype) noexcept {
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

class Context {
public:
    explicit Context(const moejit_context_options_t *options = nullptr) {
        moejit_context_t raw = nullptr;
        check(moejit_context_create(options, &raw));
        handle_.reset(raw);
    }
    moejit_context_t get() const noexcept { return handle_.get(); }
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
    std::size_t saved_size(std::int64_t tokens) const {
        std::size_t b = 0;
        check(moejit_plan_saved_size(get(), tokens, &b));
        return b;
    }
    std::size_t workspace_size(std::int64_t tokens) const {
        std::size_t b = 0;
        check(moejit_plan_workspace_size(get(), tokens, &b));
        return b;
    }
    void forward(const moejit_forward_args_t &args) const { check(moejit_plan_forward(get(), &args)); }
    void backward(const moejit_backward_args_t &args) const { check(moejit_plan_backward(get(), &args)); }

private:
    std::unique_ptr<moejit_plan_s, PlanDeleter> handle_;
};

}  // namespace moejit::api
