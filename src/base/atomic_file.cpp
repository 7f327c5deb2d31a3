#include "base/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include <fmt/format.h>

namespace moejit {
namespace {

bool write_all(int fd, const char *data, std::size_t size) {
    while (size > 0) {
        ssize_t n = ::write(fd, data, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n == 0) errno = EIO;
            return false;
        }
        data += n;
        size -= static_cast<std::size_t>(n);
    }
    return true;
}

}  // namespace

std::string unique_temp_suffix() {
    static std::atomic<std::uint64_t> counter{0};
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return fmt::format("{}.{}.{:016x}", ::getpid(), counter.fetch_add(1), rng());
}

ReadStatus read_regular_file(const std::string &path, std::size_t max_bytes, std::vector<char> &bytes,
                             std::string &why, bool follow_symlink) {
    bytes.clear();
    // O_NONBLOCK: opening a FIFO without a writer must not block; O_NOFOLLOW: a symlink planted
    // as the name fails with ELOOP instead of leading anywhere.
    int fd = ::open(path.c_str(), O_RDONLY | (follow_symlink ? 0 : O_NOFOLLOW) | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        const int e = errno;
        why = std::strerror(e);
        if (e == ENOENT || e == ENOTDIR) return ReadStatus::absent;
        if (e == ELOOP) {
            why = "a symbolic link (never followed)";
            return ReadStatus::symlink;
        }
        return ReadStatus::io_error;
    }
    struct stat st;
    ReadStatus status = ReadStatus::ok;
    if (::fstat(fd, &st) != 0) {
        why = std::strerror(errno);
        status = ReadStatus::io_error;
    } else if (!S_ISREG(st.st_mode)) {
        why = "not a regular file";
        status = ReadStatus::not_regular;
    } else if (st.st_size < 0 || static_cast<std::uint64_t>(st.st_size) > max_bytes) {
        why = fmt::format("{} bytes, more than the {} an entry may have", st.st_size, max_bytes);
        status = ReadStatus::too_large;
    } else {
        bytes.resize(static_cast<std::size_t>(st.st_size));
        std::size_t done = 0;
        while (done < bytes.size()) {
            ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (n <= 0) {
                why = n == 0 ? "shorter than its size (changed while read)" : std::strerror(errno);
                status = ReadStatus::io_error;
                break;
            }
            done += static_cast<std::size_t>(n);
        }
    }
    ::close(fd);
    if (status != ReadStatus::ok) bytes.clear();
    return status;
}

bool write_file_atomic(const std::string &path, const std::vector<std::string_view> &parts, std::string &why) {
    const std::string temp = path + ".tmp." + unique_temp_suffix();
    int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        why = std::strerror(errno);
        return false;
    }
    bool ok = true;
    for (std::string_view part : parts)
        if (ok && !write_all(fd, part.data(), part.size())) ok = false;
    if (ok && ::fsync(fd) != 0) ok = false;
    int saved = errno;
    if (::close(fd) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    // rename() is atomic and replaces the name itself (a symlink or FIFO planted there is
    // replaced, never followed).
    if (ok && ::rename(temp.c_str(), path.c_str()) != 0) {
        ok = false;
        saved = errno;
    }
    if (!ok) {
        why = std::strerror(saved);
        ::unlink(temp.c_str());
    }
    return ok;
}

bool make_folders(const std::string &path, unsigned mode, std::string &why) {
    if (path.empty()) {
        why = "empty path";
        return false;
    }
    for (std::size_t pos = 1; pos <= path.size(); ++pos) {
        if (pos != path.size() && path[pos] != '/') continue;
        const std::string prefix = path.substr(0, pos);
        if (::mkdir(prefix.c_str(), static_cast<mode_t>(mode)) != 0 && errno != EEXIST) {
            why = fmt::format("{}: {}", prefix, std::strerror(errno));
            return false;
        }
    }
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
        why = std::strerror(errno);
        return false;
    }
    if (!S_ISDIR(st.st_mode)) {
        why = "not a folder";
        return false;
    }
    return true;
}

}  // namespace moejit
