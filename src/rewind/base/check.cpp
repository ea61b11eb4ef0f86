#include "rewind/base/check.h"

#include <cstdio>
#include <cstdlib>

namespace rw::detail {

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "rewind: internal check failed at %s:%d: %s%s%s\n", file, line, cond,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace rw::detail
