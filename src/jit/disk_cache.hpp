// One folder of self-checking cubin entries, shared safely by many processes: readers never
// lock, writers publish with temp file + fsync + rename, and anything that does not validate
// is removed and reported as a miss.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/logger.hpp"
#include "jit/sha256.hpp"

namespace moejit {

// Bumped whenever the entry layout changes; part of every key.
inline constexpr std::uint32_t kCacheFormatVersion = 1;

class DiskCache {
public:
    // Creates `folder` if needed; when it cannot be created or written, logs a warning and
    // behaves as an always-missing cache (memory-only caching).
    DiskCache(std::string folder, Logger log);

    bool usable() const { return usable_; }
    const std::string &folder() const { return folder_; }
    std::string entry_path(const std::string &name, const Digest &key) const;

    enum class Lookup { hit, miss, rejected };
    // On hit, `payload` receives the cubin. A rejected entry (bad magic, version, key, size or
    // checksum) has been removed.
    Lookup load(const std::string &name, const Digest &key, std::vector<char> &payload) const;
    // Atomic publish; losing a race to another writer is success. Failures only log.
    void store(const std::string &name, const Digest &key, const std::vector<char> &payload) const;

private:
    std::string folder_;
    Logger log_;
    bool usable_ = false;
};

}  // namespace moejit
