#include "rewind/base/memory.h"

#include <unistd.h>

#include <cstdio>
#include <functional>
#include <sstream>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "rewind/base/file.h"

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

int64_t parse_cgroup_memory_limit(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
  size_t e = i;
  uint64_t v = 0;
  while (e < text.size() && text[e] >= '0' && text[e] <= '9' && e - i < 19)
    v = v * 10 + static_cast<uint64_t>(text[e++] - '0');
  if (e == i) return -1;  // "max" or not a number
  for (size_t k = e; k < text.size(); ++k)
    if (text[k] != '\n' && text[k] != ' ' && text[k] != '\t') return -1;
  if (v >= (uint64_t{1} << 62)) return -1;  // v1's "no limit" (a page-rounded 2^63 - 1)
  return static_cast<int64_t>(v);
}

int64_t cgroup_memory_limit(const std::string& proc_self_cgroup,
                            const std::function<std::string(const std::string&)>& read) {
  int64_t best = -1;
  auto lower = [&](int64_t limit) {
    if (limit > 0 && (best < 0 || limit < best)) best = limit;
  };
  // A group's limit and its parents' (a limit set higher up binds too), up to the root.
  auto walk = [&](std::string path, const std::string& mount, const char* file) {
    while (true) {
      lower(parse_cgroup_memory_limit(read(mount + path + "/" + file)));
      if (path.empty() || path == "/") break;
      const size_t s = path.find_last_of('/');
      path = s == std::string::npos ? "" : path.substr(0, s);
    }
  };
  // Lines "ID:CONTROLLERS:PATH": v2's "0::PATH", v1's with "memory" among the controllers.
  std::istringstream lines(proc_self_cgroup);
  for (std::string line; std::getline(lines, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      walk(path, "/sys/fs/cgroup", "memory.max");
    } else {
      std::istringstream cs(controllers);
      for (std::string c; std::getline(cs, c, ',');)
        if (c == "memory") walk(path, "/sys/fs/cgroup/memory", "memory.limit_in_bytes");
    }
  }
  return best;
}

namespace {

std::string read_small_file(const std::string& path) {
  auto text = read_whole_file(path);
  return text.ok() ? std::move(text).value() : std::string();
}

}  // namespace

int64_t usable_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const int64_t phys = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  const int64_t cg = cgroup_memory_limit(read_small_file("/proc/self/cgroup"), read_small_file);
  return cg > 0 && (phys == 0 || cg < phys) ? cg : phys;
}

void release_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace rw
