// Boolean environment switches (MOEJIT_COMPILE, MOEJIT_TUNE, MOEJIT_GATHER, MOEJIT_FUSE_SWIGLU):
// one strict spelling for every flag (core/config.hpp reads all variables at context creation).
#pragma once

#include <optional>

namespace moejit {

// Unset or empty -> nullopt (the flag keeps its default); exactly 1/on/true/yes -> true,
// 0/off/false/no -> false (case-insensitive, no surrounding spaces); anything else throws
// MOEJIT_ERROR_INVALID_ARGUMENT naming the variable, its value and the accepted values.
std::optional<bool> env_flag(const char *name);

}  // namespace moejit
