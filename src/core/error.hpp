// The one exception type inside the library; the C ABI turns it into a status + message.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "moejit.h"

namespace moejit {

class Error : public std::runtime_error {
public:
    Error(moejit_status_t status, std::string message)
        : std::runtime_error(std::move(message)), status_(status) {}
    moejit_status_t status() const noexcept { return status_; }

private:
    moejit_status_t status_;
};

template <class... Args>
[[noreturn]] void fail(moejit_status_t status, fmt::format_string<Args...> format, Args &&...args) {
    throw Error(status, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace moejit

// Argument checks: the message must name the argument and the expected value.
#define MOEJIT_REQUIRE(cond, ...)                                                 \
    do {                                                                          \
        if (!(cond)) ::moejit::fail(MOEJIT_ERROR_INVALID_ARGUMENT, __VA_ARGS__);  \
    } while (0)
