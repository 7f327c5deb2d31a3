#include "runtime/cache_paths.hpp"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "moejit_version.h"
#include "runtime/config.hpp"

namespace moejit {

std::string cache_root(const char *configured) {
    if (configured) return configured;
    return env_cache_root();
}

std::string versioned_cache_dir(const std::string &root) {
    if (root.empty()) return root;
    return root + "/" + MOEJIT_VERSION_STRING;
}

namespace {

std::string mode_text(mode_t mode) { return fmt::format("{:04o}", static_cast<unsigned>(mode & 07777)); }

// nullopt: fine (or absent); otherwise the reason.
std::optional<std::string> check_one(const std::string &path, bool parent, bool root_may_own = false) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return std::nullopt;  // created 0700 by moejit when needed
        return fmt::format("{}: {}", path, std::strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a folder", path);
    const uid_t me = ::geteuid();
    const bool owner_ok = st.st_uid == me || ((parent || root_may_own) && st.st_uid == 0);
    if (!owner_ok)
        return fmt::format("{} is owned by uid {}, not by uid {} (this process){}; moejit only uses cache "
                           "folders nobody else can write", path, st.st_uid, me, parent || root_may_own ? " or root" : "");
    const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    if (others_write && !(parent && (st.st_mode & S_ISVTX)))
        return fmt::format("{} is writable by group or others (mode {}); moejit only uses cache folders nobody "
                           "else can write", path, mode_text(st.st_mode));
    return std::nullopt;
}

}  // namespace

namespace {
std::optional<std::string> untrusted_folder(const std::string &folder, bool root_may_own) {
    if (folder.empty()) return std::string("no folder");
    std::filesystem::path p(folder);
    while (p.has_relative_path() && !p.has_filename()) p = p.parent_path();  // "a/b/" -> "a/b"
    if (auto why = check_one(p.string(), false, root_may_own)) return why;
    const std::filesystem::path parent = p.parent_path();
    if (!parent.empty() && parent != p)
        if (auto why = check_one(parent.string(), true)) return why;
    return std::nullopt;
}
}  // namespace

std::optional<std::string> untrusted_cache_folder(const std::string &folder) {
    return untrusted_folder(folder, false);
}

std::optional<std::string> untrusted_shipped_folder(const std::string &folder) {
    return untrusted_folder(folder, true);
}

std::string library_folder() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void *>(&library_folder), &info) == 0 || !info.dli_fname) return {};
    std::error_code ec;
    const std::filesystem::path library = std::filesystem::canonical(info.dli_fname, ec);
    return ec ? std::string() : library.parent_path().string();
}

std::string prebuilt_kernels_dir() {
    const std::string here = library_folder();
    if (here.empty()) return {};
    std::error_code ec;
    const std::filesystem::path tier = std::filesystem::path(here) / "moejit-kernels" / MOEJIT_VERSION_STRING;
    return std::filesystem::is_directory(tier, ec) ? tier.string() : std::string();
}

}  // namespace moejit
