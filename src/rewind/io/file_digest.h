// The XXH3-128 digest of a file's bytes, remembered in a side file so that it is computed once
// per file version: the side file holds one line per file, "size mtime_ns digest path", and a
// line counts only while the file's size and modification time are unchanged.
#pragma once

#include <string>

#include "rewind/base/hash.h"
#include "rewind/base/result.h"

namespace rw {

// Reads `path` through once unless `cache_file` (may be "": no cache) has its digest for the
// file's current size and mtime; records a new digest there (written to a temporary name, then
// renamed). A cache file that cannot be read or written is ignored. Errors: `path` unreadable.
Result<Hash128> file_digest(const std::string& path, const std::string& cache_file);

}  // namespace rw
