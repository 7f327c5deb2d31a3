#include "jit/disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#include <fmt/format.h>

namespace moejit {
namespace {

// Entry layout (little-endian), all checked on load:
//   magic[8] "MOEJITC\0" | u32 format | u32 reserved | key[32] | u64 payload size |
//   payload sha256[32] | payload
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

// mkdir -p; true when the folder exists afterwards.
bool make_dirs(const std::string &path) {
    if (path.empty()) return false;
    for (std::size_t pos = 1; pos <= path.size(); ++pos) {
        if (pos != path.size() && path[pos] != '/') continue;
        std::string prefix = path.substr(0, pos);
        if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
    }
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool read_file(const std::string &path, std::vector<char> &bytes) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st;
    bool ok = ::fstat(fd, &st) == 0;
    if (ok) {
        bytes.resize(static_cast<std::size_t>(st.st_size));
        std::size_t done = 0;
        while (ok && done < bytes.size()) {
            ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) ok = false;
            else done += static_cast<std::size_t>(n);
        }
    }
    ::close(fd);
    return ok;
}

bool write_all(int fd, const char *data, std::size_t size) {
    while (size > 0) {
        ssize_t n = ::write(fd, data, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        data += n;
        size -= static_cast<std::size_t>(n);
    }
    return true;
}

std::string unique_suffix() {
    static std::atomic<std::uint64_t> counter{0};
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return fmt::format("{}.{}.{:016x}", ::getpid(), counter.fetch_add(1), rng());
}

}  // namespace

DiskCache::DiskCache(std::string folder, Logger log) : folder_(std::move(folder)), log_(log) {
    if (folder_.empty()) return;
    if (!make_dirs(folder_)) {
        log_(MOEJIT_LOG_WARNING, fmt::format("moejit: cache folder {} cannot be created ({}); "
                                             "caching kernels in memory only",
                                             folder_, std::strerror(errno)));
        return;
    }
    if (::access(folder_.c_str(), W_OK) != 0) {
        log_(MOEJIT_LOG_WARNING, fmt::format("moejit: cache folder {} is not writable; entries "
                                             "already there are used, new kernels stay in memory",
                                             folder_));
    }
    usable_ = true;
}

std::string DiskCache::entry_path(const std::string &name, const Digest &key) const {
    return folder_ + "/" + name + "." + to_hex(key) + ".cubin";
}

DiskCache::Lookup DiskCache::load(const std::string &name, const Digest &key,
                                  std::vector<char> &payload) const {
    if (!usable_) return Lookup::miss;
    std::string path = entry_path(name, key);
    std::vector<char> bytes;
    if (!read_file(path, bytes)) return Lookup::miss;
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
    if (why) {
        // Remove the bad entry so the rebuilt kernel can be published in its place.
        ::unlink(path.c_str());
        log_(MOEJIT_LOG_WARNING, fmt::format("moejit: cache entry {} rejected ({}); recompiling", path, why));
        return Lookup::rejected;
    }
    payload.assign(bytes.begin() + kHeaderSize, bytes.end());
    return Lookup::hit;
}

void DiskCache::store(const std::string &name, const Digest &key,
                      const std::vector<char> &payload) const {
    if (!usable_) return;
    std::string header(kHeaderSize, '\0');
    std::memcpy(header.data(), kMagic, 8);
    put_u32(header.data() + 8, kCacheFormatVersion);
    std::memcpy(header.data() + 16, key.data(), 32);
    put_u64(header.data() + 48, payload.size());
    Digest sum = sha256(std::string_view(payload.data(), payload.size()));
    std::memcpy(header.data() + 56, sum.data(), 32);

    std::string final_path = entry_path(name, key);
    std::string temp_path = final_path + ".tmp." + unique_suffix();
    int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        log_(MOEJIT_LOG_WARNING, fmt::format("moejit: cannot write cache entry in {} ({}); kept in memory only",
                                             folder_, std::strerror(errno)));
        return;
    }
    bool ok = write_all(fd, header.data(), header.size()) &&
              write_all(fd, payload.data(), payload.size()) && ::fsync(fd) == 0;
    ok = (::close(fd) == 0) && ok;
    // rename() is atomic: readers see the old state or a complete entry, never a partial one.
    // Another process publishing the same key first is fine: both entries are identical.
    if (!ok || ::rename(temp_path.c_str(), final_path.c_str()) != 0) {
        log_(MOEJIT_LOG_WARNING, fmt::format("moejit: publishing cache entry {} failed ({}); kept in memory only",
                                             final_path, std::strerror(errno)));
        ::unlink(temp_path.c_str());
    }
}

}  // namespace moejit
