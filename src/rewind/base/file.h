// Reading a whole file into memory: configs, templates, manifests, /proc and /sys entries.
#pragma once

#include <string>

#include "rewind/base/result.h"

namespace rw {

// The bytes of the file at path. Fails with "cannot read PATH: REASON" (the system's words: no
// such file, is a directory, permission denied, an I/O error). `missing`, when given, is set to
// whether the path names nothing (no such file, or a part of it is a file, as in
// model.gguf/config.json), for callers to whom an absent file is not an error.
Result<std::string> read_whole_file(const std::string& path, bool* missing = nullptr);

}  // namespace rw
