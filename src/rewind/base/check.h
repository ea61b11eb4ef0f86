// Always-on invariant checks. A failed check is a bug in rewind, never bad user input (that
// is a Result, base/result.h): it prints file:line and the condition, then aborts.
#pragma once

#include <string>

namespace rw::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond,
                               const std::string& msg);
}  // namespace rw::detail

#define REWIND_CHECK(cond)                                                  \
  do {                                                                      \
    if (!(cond)) [[unlikely]]                                               \
      ::rw::detail::check_failed(__FILE__, __LINE__, #cond, std::string()); \
  } while (0)

#define REWIND_CHECK_MSG(cond, msg)                                 \
  do {                                                              \
    if (!(cond)) [[unlikely]]                                       \
      ::rw::detail::check_failed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)
