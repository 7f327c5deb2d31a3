// Where the disk cache lives (docs/DESIGN.md §4) and which folders moejit trusts with it.
//
// Trust boundary: whoever can write the cache folder can make every process that uses it run
// their code on its GPU (an entry's checksum is not a secret; a forger writes a valid one). So
// moejit only reads or writes a cache folder that nobody else can write:
//  - the versioned folder (where entries live) must be a folder owned by the effective user and
//    not writable by group or others;
//  - its parent (the cache root) must be owned by the effective user or by root, and not
//    writable by group or others unless it has the sticky bit (like /tmp, where others cannot
//    rename or remove what is ours);
//  - folders moejit creates are created 0700.
// A folder that breaks a rule is refused for reading and writing: the context caches kernels
// in memory only and logs one warning per folder and process.
#pragma once

#include <optional>
#include <string>

namespace moejit {

// The cache root: `configured` if non-null, else $MOEJIT_CACHE_DIR, else
// $XDG_CACHE_HOME/moejit, else $HOME/.cache/moejit. "" means no disk cache.
std::string cache_root(const char *configured);
// The versioned folder inside a root: <root>/<library version> ("" stays "").
std::string versioned_cache_dir(const std::string &root);

// Why `folder` (holding cache files) or its parent breaks the rules above; nullopt when it is
// trusted. A folder or parent that does not exist yet is fine (moejit creates it 0700).
std::optional<std::string> untrusted_cache_folder(const std::string &folder);
// The same rules for a read-only folder shipped with the library (the prebuilt tier): the folder
// may also be owned by root (a system-wide install), like its parent.
std::optional<std::string> untrusted_shipped_folder(const std::string &folder);

// The read-only tier of prebuilt kernels shipped with the library (docs/DESIGN.md §4.10):
// <folder of libmoejit.so>/moejit-kernels/<library version>, or "" when that is not a folder.
std::string prebuilt_kernels_dir();
// The folder of the file holding this code (libmoejit.so, or an executable linking it whole);
// "" when it cannot be told.
std::string library_folder();

// The mode bits folders moejit creates get.
inline constexpr unsigned kCacheFolderMode = 0700;

}  // namespace moejit
