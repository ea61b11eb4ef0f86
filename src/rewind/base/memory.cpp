#include "rewind/base/memory.h"

#include <unistd.h>

#include <cstdio>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace rw {

void MemoryReport::add(const std::string& kind, int64_t bytes) {
  for (auto& [k, b] : kinds)
    if (k == kind) {
      b += bytes;
      return;
    }
  kinds.emplace_back(kind, bytes);
}

int64_t MemoryReport::get(const std::string& kind) const {
  for (const auto& [k, b] : kinds)
    if (k == kind) return b;
  return 0;
}

int64_t MemoryReport::total() const {
  int64_t t = 0;
  for (const auto& kb : kinds) t += kb.second;
  return t;
}

int64_t process_resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  if (got != 2) return 0;
  return static_cast<int64_t>(resident) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

void release_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace rw
