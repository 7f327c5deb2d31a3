// The extensible argument structs' ABI (moejit.h, "Argument structs"; docs/DESIGN.md §5.2): which
// struct_size values each struct accepts, how a caller's struct is read (fields past its
// struct_size take their defaults), how output structs are written and how *_init fills one
// without writing past the caller's size.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <string>

#include "capi_guard.hpp"
#include "moejit.h"

namespace moejit {

// A struct_size above this is not a struct from any header, only an uninitialised field: it is
// rejected before the library reads a byte past the fields it knows.
inline constexpr std::size_t kMaxStructSize = 4096;

// One extensible struct: its C name, the *_init function that fills it, every size it had in a
// released header (ascending, append-only; the last is this header's sizeof), and its defaults.
template <class T> struct StructAbi;

#define MOEJIT_STRUCT_ABI(T, C_NAME, INIT, ...)                                             \
    template <> struct StructAbi<T> {                                                       \
        static constexpr const char *c_name = C_NAME;                                       \
        static constexpr const char *init = INIT;                                           \
        static constexpr std::size_t released[] = {__VA_ARGS__};                            \
        static void defaults(T &s);                                                          \
    };                                                                                      \
    static_assert(StructAbi<T>::released[std::size(StructAbi<T>::released) - 1] == sizeof(T), \
                  C_NAME ": append its new sizeof to the released sizes (capi_struct.hpp)")

// Released sizes: 0.1.0 (the first release) then each growth: 0.2.0 appended `x` to
// moejit_backward_args_t; 0.5.0 appended the gpt-oss fields (activation_alpha,
// weights_transposed, has_bias) to moejit_plan_desc_t and the bias pointers to the forward and
// backward args; 0.6.0 appended the configuration switches (tune, gather, fuse_swiglu,
// gemm_tile) to moejit_context_options_t; 0.11 appended `recipe` to moejit_plan_desc_t (after
// naming 0.5's tail padding, so a 0.5-0.10 struct_size of 96 still means bf16) and the FP8 weight
// cache (weight_cache, weight_cache_size, weight_cache_mode) to the forward and backward args.
MOEJIT_STRUCT_ABI(moejit_context_options_t, "moejit_context_options_t", "moejit_context_options_init",
                  offsetof(moejit_context_options_t, tune) /* 0.1 */, sizeof(moejit_context_options_t) /* 0.6 */);
MOEJIT_STRUCT_ABI(moejit_cache_stats_t, "moejit_cache_stats_t", "moejit_cache_stats_init", sizeof(moejit_cache_stats_t));
MOEJIT_STRUCT_ABI(moejit_group_gemm_nk_args_t, "moejit_group_gemm_nk_args_t", "moejit_group_gemm_nk_args_init",
                  sizeof(moejit_group_gemm_nk_args_t));
MOEJIT_STRUCT_ABI(moejit_group_gemm_mn_args_t, "moejit_group_gemm_mn_args_t", "moejit_group_gemm_mn_args_init",
                  sizeof(moejit_group_gemm_mn_args_t));
MOEJIT_STRUCT_ABI(moejit_swiglu_args_t, "moejit_swiglu_args_t", "moejit_swiglu_args_init", sizeof(moejit_swiglu_args_t));
MOEJIT_STRUCT_ABI(moejit_plan_desc_t, "moejit_plan_desc_t", "moejit_plan_desc_init",
                  offsetof(moejit_plan_desc_t, activation_alpha) /* 0.1 */,
                  offsetof(moejit_plan_desc_t, reserved_0_5_tail) + 4 /* 0.5: 96, its tail padding included */,
                  sizeof(moejit_plan_desc_t) /* 0.11: recipe */);
MOEJIT_STRUCT_ABI(moejit_forward_args_t, "moejit_forward_args_t", "moejit_forward_args_init",
                  offsetof(moejit_forward_args_t, b_gate_up) /* 0.1 */,
                  offsetof(moejit_forward_args_t, weight_cache) /* 0.5 */, sizeof(moejit_forward_args_t) /* 0.11 */);
MOEJIT_STRUCT_ABI(moejit_backward_args_t, "moejit_backward_args_t", "moejit_backward_args_init",
                  offsetof(moejit_backward_args_t, x) /* 0.1 */, offsetof(moejit_backward_args_t, b_down) /* 0.2 */,
                  offsetof(moejit_backward_args_t, weight_cache) /* 0.5 */, sizeof(moejit_backward_args_t) /* 0.11 */);
MOEJIT_STRUCT_ABI(moejit_experts_forward_args_t, "moejit_experts_forward_args_t", "moejit_experts_forward_args_init",
                  sizeof(moejit_experts_forward_args_t) /* 0.6 */);
MOEJIT_STRUCT_ABI(moejit_experts_backward_args_t, "moejit_experts_backward_args_t", "moejit_experts_backward_args_init",
                  sizeof(moejit_experts_backward_args_t) /* 0.6 */);
#undef MOEJIT_STRUCT_ABI

#if defined(__x86_64__) || defined(__aarch64__)
// LP64 pins: a change here breaks every binary built against an earlier header.
static_assert(offsetof(moejit_context_options_t, tune) == 56 && sizeof(moejit_context_options_t) == 80);
static_assert(sizeof(moejit_cache_stats_t) == 72);
static_assert(sizeof(moejit_group_gemm_nk_args_t) == 96);
static_assert(sizeof(moejit_group_gemm_mn_args_t) == 88);
static_assert(sizeof(moejit_swiglu_args_t) == 136);
static_assert(offsetof(moejit_plan_desc_t, activation_alpha) == 80 && offsetof(moejit_plan_desc_t, reserved_0_5_tail) == 92 &&
              offsetof(moejit_plan_desc_t, recipe) == 96 && sizeof(moejit_plan_desc_t) == 104);
static_assert(offsetof(moejit_forward_args_t, b_gate_up) == 120 && offsetof(moejit_forward_args_t, weight_cache) == 136 &&
              sizeof(moejit_forward_args_t) == 160);
static_assert(offsetof(moejit_backward_args_t, x) == 152 && offsetof(moejit_backward_args_t, b_down) == 160 &&
              offsetof(moejit_backward_args_t, weight_cache) == 184 && sizeof(moejit_backward_args_t) == 208);
static_assert(sizeof(moejit_experts_forward_args_t) == 136 && sizeof(moejit_experts_backward_args_t) == 192);
#endif

// What the exported unsized *_init(T *) entry points (kept for binaries built against 0.1-0.3
// headers, whose callers pass no size) write: the struct as it was in 0.3.0, frozen. Growing a
// struct must not change this, or those binaries' structs are overrun.
template <class T> inline constexpr std::size_t kLegacyInitSize = sizeof(T);
template <> inline constexpr std::size_t kLegacyInitSize<moejit_context_options_t> = 56;
template <> inline constexpr std::size_t kLegacyInitSize<moejit_plan_desc_t> = 80;
template <> inline constexpr std::size_t kLegacyInitSize<moejit_forward_args_t> = 120;
// moejit_backward_args_t: see kBackwardLegacyInitMarker.
template <> inline constexpr std::size_t kLegacyInitSize<moejit_backward_args_t> = 152;

// The unsized moejit_backward_args_init cannot know its caller's struct: binaries built against
// 0.1-0.3 headers all reference it unversioned (bound to MOEJIT_0.1), and 0.1's struct is 152
// bytes while 0.2/0.3's is 160 (x appended). It writes only the 152 bytes both have (issue 29
// item 4: before, it wrote 160, 8 bytes past a 0.1 caller's struct) and sets struct_size to
// this marker, a size no header has (odd), so the backward reads the struct as that init left
// it: 0.1's 152 bytes, plus x from the 0.2/0.3 layout when T > 0 (read_backward_args).
inline constexpr std::size_t kBackwardLegacyInitMarker = 152 + 1;
static_assert(kBackwardLegacyInitMarker % alignof(moejit_backward_args_t) != 0, "no sizeof can equal the marker");

template <class T> bool is_released_size(std::size_t size) {
    const auto &r = StructAbi<T>::released;
    return std::find(std::begin(r), std::end(r), size) != std::end(r);
}

template <class T> std::string released_sizes() {
    std::string s;
    for (std::size_t n : StructAbi<T>::released) s += (s.empty() ? "" : ", ") + std::to_string(n);
    return s;
}

// Validates a struct_size the caller claims for a T at `name` ("args", "desc", ...):
//   0                        -> INVALID_ARGUMENT (never initialised);
//   a released size          -> accepted (fields past it take their defaults);
//   another size <= sizeof T -> INVALID_ARGUMENT (no header has it);
//   > kMaxStructSize         -> INVALID_ARGUMENT (garbage);
//   otherwise (> sizeof T)   -> a newer header's: accepted by the caller (reads check the tail).
template <class T> void check_struct_size(std::size_t size, const char *name) {
    using A = StructAbi<T>;
    MOEJIT_REQUIRE(size != 0, "{}->struct_size is 0: initialise the {} with {}() first", name, A::c_name, A::init);
    if (size <= sizeof(T)) {
        MOEJIT_REQUIRE(is_released_size<T>(size),
                       "{}->struct_size is {}, which no moejit header has for {} (its sizes: {}); initialise it "
                       "with {}()",
                       name, size, A::c_name, released_sizes<T>(), A::init);
        return;
    }
    MOEJIT_REQUIRE(size <= kMaxStructSize,
                   "{}->struct_size is {}, far larger than {} ever is ({} bytes in moejit {}); is it initialised?",
                   name, size, A::c_name, sizeof(T), MOEJIT_VERSION_STRING);
}

// A caller's input struct, as this library's T: the caller's first struct_size bytes, the
// fields past them at their defaults. A larger struct_size (a newer header) is accepted only if
// every byte this library does not know is zero, i.e. each newer field is at its default
// (moejit.h: a field added later must default to zero); otherwise it is INVALID_ARGUMENT.
template <class T> T read_struct(const T *p, const char *name) {
    MOEJIT_REQUIRE(p != nullptr, "{} is NULL", name);
    const std::size_t size = p->struct_size;
    check_struct_size<T>(size, name);
    if (size > sizeof(T)) {
        const auto *bytes = reinterpret_cast<const unsigned char *>(p);
        for (std::size_t i = sizeof(T); i < size; ++i)
            MOEJIT_REQUIRE(bytes[i] == 0,
                           "{}->struct_size is {} but this library (moejit {}) knows {} bytes of {}, and byte {} is "
                           "set: a field from a newer header that this library cannot honour (use a newer "
                           "library, or leave that field at its default)",
                           name, size, MOEJIT_VERSION_STRING, sizeof(T), StructAbi<T>::c_name, i);
    }
    T s;
    std::memset(static_cast<void *>(&s), 0, sizeof s);
    StructAbi<T>::defaults(s);
    std::memcpy(static_cast<void *>(&s), p, std::min(size, sizeof(T)));
    s.struct_size = sizeof(T);
    return s;
}

// An output struct: the caller's struct_size is validated like an input's; only
// min(struct_size, sizeof T) bytes are written (struct_size itself is left as the caller set
// it), and bytes past sizeof T, fields this library does not know, keep the caller's values.
template <class T> void write_struct(T *p, const T &value, const char *name) {
    MOEJIT_REQUIRE(p != nullptr, "{} is NULL", name);
    const std::size_t size = p->struct_size;
    check_struct_size<T>(size, name);
    constexpr std::size_t head = offsetof(T, struct_size) + sizeof(std::size_t);
    static_assert(offsetof(T, struct_size) == 0);
    std::memcpy(reinterpret_cast<unsigned char *>(p) + head, reinterpret_cast<const unsigned char *>(&value) + head,
                std::min(size, sizeof(T)) - head);
}

// *_init_sized: fills the caller's `size` bytes, and not one more: the defaults for the fields
// that fit, zero for any bytes past this library's struct (a newer header's fields, which
// default to zero), struct_size = size. An unknown size writes nothing.
template <class T> void init_struct(T *p, std::size_t size, const char *name) {
    MOEJIT_REQUIRE(p != nullptr, "{} is NULL", name);
    MOEJIT_REQUIRE(size != 0, "struct_size is 0, expected sizeof({}) (pass sizeof of the struct you initialise)",
                   StructAbi<T>::c_name);
    if (size <= sizeof(T))
        MOEJIT_REQUIRE(is_released_size<T>(size), "struct_size is {}, which no moejit header has for {} (its sizes: {})",
                       size, StructAbi<T>::c_name, released_sizes<T>());
    MOEJIT_REQUIRE(size <= kMaxStructSize, "struct_size is {}, far larger than {} ever is ({} bytes in moejit {})",
                   size, StructAbi<T>::c_name, sizeof(T), MOEJIT_VERSION_STRING);
    T s;
    std::memset(static_cast<void *>(&s), 0, sizeof s);
    StructAbi<T>::defaults(s);
    s.struct_size = size;
    auto *out = reinterpret_cast<unsigned char *>(p);
    std::memcpy(out, &s, std::min(size, sizeof(T)));
    if (size > sizeof(T)) std::memset(out + sizeof(T), 0, size - sizeof(T));
}

}  // namespace moejit
