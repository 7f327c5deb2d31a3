// Boost.Test prints both operands of a failed BOOST_TEST(a == b): the library's scoped enums
// (Status, DType, LogLevel, ...) print as their number, which is also the C ABI's value.
#pragma once

#include <ostream>
#include <type_traits>

namespace moejit {

template <class E, std::enable_if_t<std::is_enum_v<E>, int> = 0>
std::ostream &operator<<(std::ostream &os, E value) {
    return os << static_cast<long long>(value);
}

}  // namespace moejit
