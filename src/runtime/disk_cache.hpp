// One folder of self-checking cubin entries, shared safely by many processes: readers never
// lock, writers publish with temp file + fsync + rename (base/atomic_file.hpp).
//
// Trust: the folder is used only when nobody else can write it (runtime/cache_paths.hpp); an entry
// is read only when it is a regular file of at most kMaxEntryBytes (opened O_NOFOLLOW |
// O_NONBLOCK, checked with fstat before reading). Reading never changes the folder: an entry
// that does not validate is a miss (counted as rejected, logged) and is replaced by the next
// publish of the same key, so a context with JIT off (moejit-warmup --check) is read-only. The
// folder is created (0700) when the first entry is published, not before.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/logger.hpp"
#include "base/sha256.hpp"

namespace moejit {

// Bumped whenever the entry layout changes; part of every key. 2: the entry holds the kernel's
// lowered name before the cubin (the typed kernel ABI's symbols come from NVRTC).
inline constexpr std::uint32_t kCacheFormatVersion = 2;

// Longest lowered name an entry may hold (mangled template instantiations are a few hundred bytes).
inline constexpr std::size_t kMaxFunctionNameBytes = 4096;

// What an entry stores: the module and the symbol of its one kernel in it.
struct CachedKernel {
    std::string function;  // the lowered name (non-empty, no NUL, at most kMaxFunctionNameBytes)
    std::vector<char> cubin;
};

// Entries larger than this are not read (cubins are tens to hundreds of KiB).
inline constexpr std::size_t kMaxEntryBytes = std::size_t(256) << 20;

class DiskCache {
public:
    // Checks that `folder` may be used (see above); when it may not, logs one warning (per
    // folder and process) and behaves as an always-missing cache (memory-only caching).
    DiskCache(std::string folder, Logger log);
    // A read-only folder shipped with the library (the prebuilt tier): trusted when owned by
    // this user or root (untrusted_shipped_folder); never stored into (store() is not called).
    struct Shipped {};
    DiskCache(std::string folder, Logger log, Shipped);

    bool usable() const { return usable_.load(); }
    const std::string &folder() const { return folder_; }
    std::string entry_path(const std::string &name, const Digest &key) const;

    enum class Lookup { hit, miss, rejected };
    // On hit, `entry` receives the lowered name and the cubin. `rejected`: an entry exists under
    // the name but is not a valid one for `key` (bad magic, version, key, size, checksum, function
    // name, not a regular file, too large); it is left in place. Never throws for anything found
    // on disk.
    Lookup load(const std::string &name, const Digest &key, CachedKernel &entry) const;
    // Atomic publish; losing a race to another writer is success. Returns false when the entry
    // could not be stored (or its function name is not storable); the kernel then lives in
    // memory only. A failed publish (disk full, read-only folder) is logged once per DiskCache,
    // that is once per context: a full disk fails every kernel the same way.
    bool store(const std::string &name, const Digest &key, const CachedKernel &entry) const;

private:
    DiskCache(std::string folder, Logger log, bool shipped);
    bool ensure_folder() const;

    std::string folder_;
    Logger log_;
    mutable std::atomic<bool> usable_{false};
    mutable std::once_flag created_;
    mutable bool created_ok_ = false;
    mutable std::atomic<bool> publish_failure_logged_{false};
};

// Logs `message` at warning level unless a warning with the same `key` was already logged by
// this process (folder-level problems repeat for every context otherwise).
void warn_once(const Logger &log, const std::string &key, const std::string &message);

}  // namespace moejit
