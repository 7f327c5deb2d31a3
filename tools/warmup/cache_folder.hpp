// What the tool knows about the library's disk cache layout (docs/DESIGN.md §4): the versioned
// folder holds `<kernel>.<sha256 hex>.cubin` entries, and writers publish through
// `<entry>.tmp.<unique>` files that a crash can leave behind. Everything else is left alone.
#pragma once

#include <cstdint>
#include <string>

namespace warmup {

struct FolderScan {
    bool exists = false;
    std::uint64_t entries = 0, entry_bytes = 0;  // *.cubin
    std::uint64_t temp_files = 0, temp_bytes = 0;  // *.cubin.tmp.*
    std::uint64_t disk_bytes = 0;  // allocated blocks of entries and temp files
};

struct ClearResult {
    std::uint64_t removed_entries = 0, removed_bytes = 0, removed_temps = 0, kept_temps = 0, failed = 0;
};

// A temp file older than this cannot belong to a live writer (a publish is one write + fsync).
inline constexpr int kStaleTempSeconds = 60;

FolderScan scan_cache_folder(const std::string &folder);
// Removes *.cubin entries and stale temp files of `folder` only (no recursion, no other files).
ClearResult clear_cache_folder(const std::string &folder);

// Before a warmup compiles anything: creates `folder` and its missing parents 0700 (as the
// library would with its first entry) and writes and removes a probe file in it. Returns ""
// when entries can be stored there, else why not (naming the path and the system's reason).
std::string prepare_cache_folder(const std::string &folder);

bool is_cache_entry(const std::string &file_name);
bool is_temp_file(const std::string &file_name);
std::string human_bytes(std::uint64_t bytes);

}  // namespace warmup
