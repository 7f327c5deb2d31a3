// Boolean environment switches (MOEJIT_COMPILE, MOEJIT_TUNE): one spelling for every flag.
#pragma once

#include <strings.h>

#include <cstdlib>
#include <optional>

namespace moejit {

// 1/on/true/yes -> true, 0/off/false/no -> false (case-insensitive); unset or anything else
// -> nullopt, so each flag keeps its own default.
inline std::optional<bool> env_flag(const char *name) {
    const char *v = std::getenv(name);
    if (!v) return std::nullopt;
    for (const char *on : {"1", "on", "true", "yes"})
        if (::strcasecmp(v, on) == 0) return true;
    for (const char *off : {"0", "off", "false", "no"})
        if (::strcasecmp(v, off) == 0) return false;
    return std::nullopt;
}

}  // namespace moejit
