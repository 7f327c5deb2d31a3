// Checked arithmetic for sizes and counts computed from caller values (issue 16 item 4).
// Every product or sum that a caller's number feeds goes through these: an overflow is
// Status::invalid_argument whose message names the argument, never signed-overflow UB or a
// wrapped size_t that under-allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "base/error.hpp"

namespace moejit {

// INVALID_ARGUMENT "<arg> is too large: <a> <op> <b> overflows a <bits>-bit <signedness> integer".
template <class T> [[noreturn]] void fail_overflow(const char *arg, T a, const char *op, T b) {
    static_assert(std::is_integral_v<T>);
    fail(Status::invalid_argument, "{} is too large: {} {} {} overflows a {}-bit {} integer", arg, a, op, b,
         sizeof(T) * 8, std::is_signed_v<T> ? "signed" : "unsigned");
}

// a·b, or INVALID_ARGUMENT naming `arg` (fail_overflow).
template <class T> T checked_mul(T a, T b, const char *arg) {
    T r{};
    if (__builtin_mul_overflow(a, b, &r)) fail_overflow(arg, a, "·", b);
    return r;
}

// a+b, or INVALID_ARGUMENT naming `arg` (fail_overflow).
template <class T> T checked_add(T a, T b, const char *arg) {
    T r{};
    if (__builtin_add_overflow(a, b, &r)) fail_overflow(arg, a, "+", b);
    return r;
}

// A byte count: the product of non-negative factors as size_t (negative factors are
// INVALID_ARGUMENT too, since they would wrap on conversion).
inline std::size_t checked_bytes(std::initializer_list<std::int64_t> factors, const char *arg) {
    std::size_t r = 1;
    for (std::int64_t f : factors) {
        if (f < 0) fail(Status::invalid_argument, "{} is invalid: a size factor is negative ({})", arg, f);
        r = checked_mul<std::size_t>(r, static_cast<std::size_t>(f), arg);
    }
    return r;
}

// The scattered row count S = T·k of a layer call, validated as every entry point that takes
// T does: T >= 0 and T·k <= 2^31-1 (scatter_index, offsets and row ids are int32). `arg` names
// T as the caller spelled it ("num_tokens", "args->num_tokens", "desc->tokens_hint").
inline std::int64_t checked_rows(std::int64_t tokens, std::int32_t top_k, const char *arg) {
    MOEJIT_REQUIRE(tokens >= 0, "{} is {}, expected >= 0", arg, tokens);
    MOEJIT_REQUIRE(top_k >= 1, "top_k is {}, expected >= 1 (with {} = {})", top_k, arg, tokens);
    const std::int64_t rows = checked_mul<std::int64_t>(tokens, top_k, arg);
    MOEJIT_REQUIRE(rows <= std::numeric_limits<std::int32_t>::max(),
                   "{} is {}: T·k = {} · {} exceeds 2^31-1 (scattered rows are indexed with int32)", arg, tokens,
                   tokens, top_k);
    return rows;
}

}  // namespace moejit
