// The ground rules for files moejit keeps on disk (cache entries, tuning winners), in one place:
//  - reads open with O_NOFOLLOW | O_NONBLOCK, then fstat: only a regular file of at most
//    `max_bytes` is read (a symlink, FIFO, device, folder or oversized/sparse file is refused
//    without reading a byte, so it can neither hang the process nor exhaust its memory);
//  - writes go to a fresh temp file next to the target (unique name, O_CREAT | O_EXCL |
//    O_NOFOLLOW), are fsynced and renamed over the target: readers see the old file or the
//    whole new one, never a part, and a planted temp name or symlink cannot redirect the write.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace moejit {

enum class ReadStatus {
    ok,
    absent,       // no such file (or folder)
    symlink,      // the name is a symbolic link: never followed
    not_regular,  // FIFO, socket, device, folder
    too_large,    // larger than max_bytes (checked with fstat before reading)
    io_error,     // open/read failed otherwise
};

// Reads `path` whole into `bytes` under the rules above; `why` says what went wrong otherwise.
// `follow_symlink` (toolkit headers only, never cache files) lets the last component be a link.
ReadStatus read_regular_file(const std::string &path, std::size_t max_bytes, std::vector<char> &bytes,
                             std::string &why, bool follow_symlink = false);

// Publishes `parts` (concatenated) as `path` through temp file + fsync + rename. False with
// `why` (errno text) on failure; the temp file is removed then.
bool write_file_atomic(const std::string &path, const std::vector<std::string_view> &parts, std::string &why);

// The suffix of temp files: "<pid>.<counter>.<16 random hex digits>".
std::string unique_temp_suffix();

// mkdir -p, creating every missing component with `mode` (existing ones are left as they are).
// True when `path` is a folder afterwards; otherwise `why` says why not.
bool make_folders(const std::string &path, unsigned mode, std::string &why);

}  // namespace moejit
