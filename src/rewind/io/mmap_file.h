// A read-only memory mapping of a whole file (POSIX mmap, MAP_PRIVATE). The bytes are valid
// for the life of the MappedFile; nothing is copied, pages are read lazily by the kernel.
// A zero-length file is a valid, empty mapping (data() == nullptr, size() == 0).
//
// Ownership: move-only; the destructor unmaps. Thread-safety: the mapping is immutable, so
// concurrent reads are safe. Caveat: if another process truncates the file while it is mapped,
// touching the lost pages raises SIGBUS; rewind never writes to files it has mapped.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "rewind/base/result.h"

namespace rw {

class MappedFile {
 public:
  // Opens and maps `path`. Errors (one line, naming the path, with strerror): the file cannot
  // be opened or stat'ed, is a directory or not a regular file, or mmap fails.
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;  // empty mapping
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }  // nullptr when size() == 0
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // The bytes as text (e.g. a JSON file); no copy.
  std::string_view text() const {
    return size_ == 0 ? std::string_view()
                      : std::string_view(reinterpret_cast<const char*>(data_), size_);
  }

 private:
  void reset();

  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace rw
