#include "rewind/base/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rw {

Result<std::string> read_whole_file(const std::string& path, bool* missing) {
  if (missing) *missing = false;
  auto fail = [&](int err) {
    if (missing) *missing = err == ENOENT || err == ENOTDIR;
    return make_error("cannot read " + path + ": " + std::strerror(err));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(errno);
  struct stat sb {};
  if (::fstat(fd, &sb) != 0 || S_ISDIR(sb.st_mode)) {
    const int err = S_ISDIR(sb.st_mode) ? EISDIR : errno;
    ::close(fd);
    return fail(err);
  }
  std::string text;
  // /proc and /sys files report size 0: read until end of file whatever the size says.
  if (S_ISREG(sb.st_mode) && sb.st_size > 0) text.reserve(static_cast<size_t>(sb.st_size));
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      text.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      const int err = errno;
      ::close(fd);
      return fail(err);
    }
  }
  ::close(fd);
  return text;
}

}  // namespace rw
