// The one exception type inside the library, with the status it stands for; the C ABI turns it
// into a moejit_status_t and a message (capi/capi_guard.hpp).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace moejit {

// What went wrong. The values are moejit_status_t's (capi/capi_convert.cpp asserts each one), so
// the C boundary converts by value.
enum class Status : std::int32_t {
    success = 0,
    invalid_argument = 1,  // a bad value; the message names the argument
    unsupported = 2,       // valid but not implemented (shape, dtype, arch)
    out_of_memory = 3,     // host allocation failed
    no_driver = 4,         // libcuda could not be loaded
    no_device = 5,         // driver present, no (such) CUDA device
    cuda = 6,              // a driver call failed; the message names it
    compile = 7,           // NVRTC failed; the message holds its log
    jit_disabled = 8,      // cache miss with compilation switched off
    cache = 9,             // reserved: cache problems degrade, they do not fail
    internal = 10,         // a bug in moejit
};

class Error : public std::runtime_error {
public:
    Error(Status status, std::string message) : std::runtime_error(std::move(message)), status_(status) {}
    Status status() const noexcept { return status_; }

private:
    Status status_;
};

template <class... Args>
[[noreturn]] void fail(Status status, fmt::format_string<Args...> format, Args &&...args) {
    throw Error(status, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace moejit

// Argument checks: the message must name the argument and the expected value.
#define MOEJIT_REQUIRE(cond, ...)                                                   \
    do {                                                                            \
        if (!(cond)) ::moejit::fail(::moejit::Status::invalid_argument, __VA_ARGS__); \
    } while (0)
