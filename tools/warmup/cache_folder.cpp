#include "warmup/cache_folder.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

namespace warmup {
namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string &s, const std::string &tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

template <class F> void for_each_file(const std::string &folder, F &&visit) {
    std::error_code ec;
    fs::directory_iterator it(folder, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
        std::string name = it->path().filename().string();
        if (!is_cache_entry(name) && !is_temp_file(name)) continue;
        struct stat st;
        // lstat: never follow a link out of the cache folder.
        if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
        visit(it->path(), name, st);
    }
}

}  // namespace

bool is_cache_entry(const std::string &name) { return ends_with(name, ".cubin") && name.size() > 6; }

bool is_temp_file(const std::string &name) {
    std::size_t at = name.find(".cubin.tmp.");
    return at != std::string::npos && at > 0 && at + 11 < name.size();
}

FolderScan scan_cache_folder(const std::string &folder) {
    FolderScan scan;
    std::error_code ec;
    scan.exists = !folder.empty() && fs::is_directory(folder, ec);
    if (!scan.exists) return scan;
    for_each_file(folder, [&](const fs::path &, const std::string &name, const struct stat &st) {
        auto size = static_cast<std::uint64_t>(st.st_size);
        if (is_cache_entry(name)) {
            ++scan.entries;
            scan.entry_bytes += size;
        } else {
            ++scan.temp_files;
            scan.temp_bytes += size;
        }
        scan.disk_bytes += static_cast<std::uint64_t>(st.st_blocks) * 512;
    });
    return scan;
}

ClearResult clear_cache_folder(const std::string &folder) {
    ClearResult result;
    if (folder.empty()) return result;
    const std::time_t now = std::time(nullptr);
    for_each_file(folder, [&](const fs::path &path, const std::string &name, const struct stat &st) {
        bool entry = is_cache_entry(name);
        if (!entry && now - st.st_mtime < kStaleTempSeconds) {
            ++result.kept_temps;  // another process may be publishing right now
            return;
        }
        // Readers that already opened an entry keep their copy; unlink is safe under them.
        if (::unlink(path.c_str()) != 0) {
            ++result.failed;
            return;
        }
        if (entry) {
            ++result.removed_entries;
            result.removed_bytes += static_cast<std::uint64_t>(st.st_size);
        } else {
            ++result.removed_temps;
        }
    });
    return result;
}

std::string prepare_cache_folder(const std::string &folder) {
    if (folder.empty()) return "no cache folder";
    // mkdir -p, component by component, so the message names the one that failed.
    std::string prefix;
    std::size_t at = 0;
    while (at != std::string::npos) {
        at = folder.find('/', at + 1);
        prefix = folder.substr(0, at);
        if (prefix.empty()) continue;
        if (::mkdir(prefix.c_str(), 0700) == 0 || errno == EEXIST) {
            struct stat st;
            if (::stat(prefix.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
                return fmt::format("{} is not a folder", prefix);
            continue;
        }
        return fmt::format("cannot create {}: {}", prefix, std::strerror(errno));
    }
    // The library publishes entries as temp file + rename; a probe file exercises the same
    // rights (create, write, remove) without leaving anything behind.
    std::string probe = folder + "/.moejit-warmup-probe.XXXXXX";
    int fd = ::mkstemp(probe.data());
    if (fd < 0) return fmt::format("cannot create a file in {}: {}", folder, std::strerror(errno));
    const char byte = 0;
    bool wrote = ::write(fd, &byte, 1) == 1;
    int write_errno = errno;
    ::close(fd);
    ::unlink(probe.c_str());
    if (!wrote) return fmt::format("cannot write a file in {}: {}", folder, std::strerror(write_errno));
    return "";
}

std::string human_bytes(std::uint64_t bytes) {
    if (bytes < 1024) return fmt::format("{} B", bytes);
    const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = -1;
    while (v >= 1024 && u < 3) v /= 1024, ++u;
    return fmt::format("{:.1f} {}", v, units[u]);
}

}  // namespace warmup
