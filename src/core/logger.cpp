#include "core/logger.hpp"

#include <string>

namespace moejit {

void Logger::operator()(moejit_log_level_t level, std::string_view message) const {
    if (!fn) return;
    std::string text(message);  // the callback gets a NUL-terminated copy
    fn(level, text.c_str(), user_data);
}

}  // namespace moejit
