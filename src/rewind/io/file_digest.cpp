#include "rewind/io/file_digest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace rw {

Result<Hash128> file_digest(const std::string& path, const std::string& cache_file) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) return make_error(path + ": " + std::strerror(errno));
  std::error_code ec;
  const std::string abs = std::filesystem::absolute(path, ec).string();
  const long long size = static_cast<long long>(sb.st_size);
  const long long mtime =
      static_cast<long long>(sb.st_mtim.tv_sec) * 1000000000LL + sb.st_mtim.tv_nsec;
  std::vector<std::string> keep;  // the cache's lines for other files
  if (!cache_file.empty()) {
    std::ifstream in(cache_file);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      long long s = -1, m = -1;
      std::string hex, p;
      ls >> s >> m >> hex;
      std::getline(ls, p);
      if (!p.empty() && p[0] == ' ') p.erase(0, 1);
      Hash128 h;
      if (p.empty() || !Hash128::from_hex(hex, &h)) continue;  // a damaged line: dropped
      if (p == abs) {
        if (s == size && m == mtime) return h;
        continue;  // stale
      }
      keep.push_back(line);
    }
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(path + ": " + std::strerror(errno));
  Hasher hs;
  std::vector<char> buf(size_t{4} << 20);
  for (;;) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int e = errno;
      ::close(fd);
      return make_error(path + ": " + std::strerror(e));
    }
    if (r == 0) break;
    hs.update(buf.data(), static_cast<size_t>(r));
  }
  ::close(fd);
  const Hash128 h = hs.digest128();
  if (!cache_file.empty()) {
    const std::string tmp = cache_file + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      for (const auto& l : keep) out << l << "\n";
      out << size << " " << mtime << " " << h.hex() << " " << abs << "\n";
    }
    std::filesystem::rename(tmp, cache_file, ec);
    if (ec) std::filesystem::remove(tmp, ec);
  }
  return h;
}

}  // namespace rw
