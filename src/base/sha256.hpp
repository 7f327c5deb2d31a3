// SHA-256 (FIPS 180-4): cache keys and entry checksums must be stable across builds and
// machines, so nothing on disk uses std::hash.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace moejit {

using Digest = std::array<std::uint8_t, 32>;

class Sha256 {
public:
    Sha256();
    Sha256 &update(const void *data, std::size_t size);
    Sha256 &update(std::string_view text) { return update(text.data(), text.size()); }
    // Length-prefixed field: 8-byte little-endian size, then the bytes. Canonical records are
    // built from these, so "ab"+"c" and "a"+"bc" never collide.
    Sha256 &field(std::string_view text);
    Digest finish();

private:
    void compress(const std::uint8_t *block);
    std::array<std::uint32_t, 8> state_;
    std::array<std::uint8_t, 64> buffer_{};
    std::size_t buffered_ = 0;
    std::uint64_t total_ = 0;
};

Digest sha256(std::string_view data);
std::string to_hex(const Digest &digest);

}  // namespace moejit
