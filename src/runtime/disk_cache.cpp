#include "runtime/disk_cache.hpp"

#include <cerrno>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "base/atomic_file.hpp"
#include "runtime/cache_paths.hpp"

namespace moejit {
namespace {

// Entry layout (little-endian), all checked on load:
//   magic[8] "MOEJITC\0" | u32 format | u32 function name length | key[32] | u64 payload size |
//   payload sha256[32] | payload, where payload = function name | cubin (the checksum covers both)
constexpr char kMagic[8] = {'M', 'O', 'E', 'J', 'I', 'T', 'C', '\0'};
constexpr std::size_t kHeaderSize = 8 + 4 + 4 + 32 + 8 + 32;

void put_u32(char *p, std::uint32_t v) { for (int i = 0; i < 4; ++i) p[i] = char(v >> (8 * i)); }
void put_u64(char *p, std::uint64_t v) { for (int i = 0; i < 8; ++i) p[i] = char(v >> (8 * i)); }
std::uint32_t get_u32(const char *p) {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= std::uint32_t(std::uint8_t(p[i])) << (8 * i);
    return v;
}
std::uint64_t get_u64(const char *p) {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= std::uint64_t(std::uint8_t(p[i])) << (8 * i);
    return v;
}

}  // namespace

void warn_once(const Logger &log, const std::string &key, const std::string &message) {
    static std::mutex mutex;
    static std::set<std::string> seen;
    {
        std::lock_guard lock(mutex);
        if (!seen.insert(key).second) return;
    }
    log(LogLevel::warning, message);
}

namespace {

// Whoever can write a cache folder can run code on this GPU (docs/DESIGN.md, cache trust): true,
// with a warning (once per folder), when `folder` is not safe to load kernels from.
bool refuse_untrusted(const Logger &log, const std::string &folder) {
    const std::optional<std::string> why = untrusted_cache_folder(folder);
    if (!why) return false;
    warn_once(log, "refused:" + folder,
              fmt::format("moejit: cache folder {} cannot be used ({}); caching kernels in memory only", folder,
                          *why));
    return true;
}

}  // namespace

DiskCache::DiskCache(std::string folder, Logger log) : DiskCache(std::move(folder), log, false) {}

DiskCache::DiskCache(std::string folder, Logger log, Shipped) : DiskCache(std::move(folder), log, true) {}

DiskCache::DiskCache(std::string folder, Logger log, bool shipped) : folder_(std::move(folder)), log_(log) {
    if (folder_.empty()) return;
    if (!shipped) {
        if (refuse_untrusted(log_, folder_)) return;
    } else if (std::optional<std::string> why = untrusted_shipped_folder(folder_)) {
        warn_once(log_, "refused:" + folder_,
                  fmt::format("moejit: the prebuilt kernels in {} are not used ({})", folder_, *why));
        return;
    }
    usable_ = true;
}

std::string DiskCache::entry_path(const std::string &name, const Digest &key) const {
    return folder_ + "/" + name + "." + to_hex(key) + ".cubin";
}

DiskCache::Lookup DiskCache::load(const std::string &name, const Digest &key, CachedKernel &entry) const {
    if (!usable()) return Lookup::miss;
    const std::string path = entry_path(name, key);
    std::vector<char> bytes;
    std::string why_read;
    switch (read_regular_file(path, kMaxEntryBytes, bytes, why_read)) {
    case ReadStatus::ok: break;
    case ReadStatus::absent: return Lookup::miss;
    default:
        log_(LogLevel::warning, fmt::format("moejit: cache entry {} not read ({}); recompiling", path, why_read));
        return Lookup::rejected;
    }
    const char *why = nullptr;
    if (bytes.size() < kHeaderSize) why = "truncated header";
    else if (std::memcmp(bytes.data(), kMagic, 8) != 0) why = "bad magic";
    else if (get_u32(bytes.data() + 8) != kCacheFormatVersion) why = "other cache format version";
    else if (std::memcmp(bytes.data() + 16, key.data(), 32) != 0) why = "key mismatch";
    else if (get_u64(bytes.data() + 48) != bytes.size() - kHeaderSize) why = "payload size mismatch";
    else {
        Digest sum = sha256(std::string_view(bytes.data() + kHeaderSize, bytes.size() - kHeaderSize));
        if (std::memcmp(sum.data(), bytes.data() + 56, 32) != 0) why = "checksum mismatch";
    }
    const std::size_t function_bytes = why ? 0 : get_u32(bytes.data() + 12);
    if (!why && (function_bytes == 0 || function_bytes > kMaxFunctionNameBytes ||
                 function_bytes > bytes.size() - kHeaderSize ||
                 std::memchr(bytes.data() + kHeaderSize, '\0', function_bytes) != nullptr))
        why = "bad function name";
    if (why) {
        // Left in place: reading never changes the folder; the rebuilt kernel's publish
        // replaces it (rename), which a read-only (JIT off) context never does.
        log_(LogLevel::warning, fmt::format("moejit: cache entry {} rejected ({}); recompiling", path, why));
        return Lookup::rejected;
    }
    const auto function_begin = bytes.begin() + static_cast<std::ptrdiff_t>(kHeaderSize);
    const auto cubin_begin = function_begin + static_cast<std::ptrdiff_t>(function_bytes);
    entry.function.assign(function_begin, cubin_begin);
    entry.cubin.assign(cubin_begin, bytes.end());
    return Lookup::hit;
}

bool DiskCache::ensure_folder() const {
    std::call_once(created_, [&] {
        std::string why;
        if (!make_folders(folder_, kCacheFolderMode, why)) {
            warn_once(log_, "create:" + folder_,
                      fmt::format("moejit: cache folder {} cannot be created ({}); caching kernels in memory only",
                                  folder_, why));
            return;
        }
        // Checked again now that it exists: another user may have created it first.
        if (refuse_untrusted(log_, folder_)) return;
        created_ok_ = true;
    });
    if (!created_ok_) usable_ = false;
    return created_ok_;
}

bool DiskCache::store(const std::string &name, const Digest &key, const CachedKernel &entry) const {
    if (!usable()) return false;
    if (entry.function.empty() || entry.function.size() > kMaxFunctionNameBytes ||
        entry.function.find('\0') != std::string::npos) {
        log_(LogLevel::warning, fmt::format("moejit: kernel {} has no storable function name; kept in memory only",
                                            name));
        return false;
    }
    if (!ensure_folder()) return false;
    std::string header(kHeaderSize, '\0');
    std::memcpy(header.data(), kMagic, 8);
    put_u32(header.data() + 8, kCacheFormatVersion);
    put_u32(header.data() + 12, static_cast<std::uint32_t>(entry.function.size()));
    std::memcpy(header.data() + 16, key.data(), 32);
    const std::string_view cubin(entry.cubin.data(), entry.cubin.size());
    put_u64(header.data() + 48, entry.function.size() + cubin.size());
    Sha256 sum_of;
    sum_of.update(entry.function);
    sum_of.update(cubin);
    const Digest sum = sum_of.finish();
    std::memcpy(header.data() + 56, sum.data(), 32);

    const std::string final_path = entry_path(name, key);
    std::string why;
    // Another process publishing the same key first is fine: both entries are identical.
    if (!write_file_atomic(final_path, {header, entry.function, cubin}, why)) {
        // Once per context (this cache): a full disk or a read-only folder fails every publish
        // the same way, and each context's log callback hears it once.
        if (!publish_failure_logged_.exchange(true))
            log_(LogLevel::warning,
                 fmt::format("moejit: publishing cache entry {} failed ({}); this context keeps the kernels it "
                             "compiles in memory and runs on, but they are not stored for other processes (a new "
                             "process compiles them again). Further publish failures of this context are not "
                             "logged",
                             final_path, why));
        return false;
    }
    return true;
}

}  // namespace moejit
