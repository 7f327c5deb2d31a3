// Where the disk cache lives (DESIGN.md §4).
#pragma once

#include <string>

namespace moejit {

// The cache root: `configured` if non-null, else $MOEJIT_CACHE_DIR, else
// $XDG_CACHE_HOME/moejit, else $HOME/.cache/moejit. "" means no disk cache.
std::string cache_root(const char *configured);
// The versioned folder inside a root: <root>/<library version> ("" stays "").
std::string versioned_cache_dir(const std::string &root);

}  // namespace moejit
