// Routes library messages to the user's log callback (silent without one).
#pragma once

#include <string_view>

#include "moejit.h"

namespace moejit {

struct Logger {
    moejit_log_fn fn = nullptr;
    void *user_data = nullptr;
    void operator()(moejit_log_level_t level, std::string_view message) const;
};

}  // namespace moejit
