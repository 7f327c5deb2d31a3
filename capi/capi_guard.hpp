// The boundary between C callers and the C++ implementation: every entry point runs its body
// inside capi_guard, so no exception crosses the ABI and every failure leaves a message.
#pragma once

#include <cstddef>
#include <string>

#include "base/error.hpp"
#include "moejit.h"

namespace moejit {

void set_last_error(std::string message);
void clear_last_error();

template <class F> moejit_status_t capi_guard(F &&body) noexcept {
    try {
        clear_last_error();
        body();
        return MOEJIT_SUCCESS;
    } catch (const Error &e) {
        set_last_error(e.what());
        return static_cast<moejit_status_t>(e.status());  // the same values (capi_convert.cpp)
    } catch (const std::bad_alloc &) {
        set_last_error("out of host memory");
        return MOEJIT_ERROR_OUT_OF_MEMORY;
    } catch (const std::exception &e) {
        set_last_error(std::string("internal error: ") + e.what());
        return MOEJIT_ERROR_INTERNAL;
    } catch (...) {
        set_last_error("internal error: unknown exception");
        return MOEJIT_ERROR_INTERNAL;
    }
}

template <class T> T &require_handle(T *handle, const char *name) {
    MOEJIT_REQUIRE(handle != nullptr, "{} is NULL", name);
    return *handle;
}

}  // namespace moejit
