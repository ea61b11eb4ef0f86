// Tests that need a program outside the build (redis-server, node): skipped where it is missing,
// failed in CI, where every test must run.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace rw::test {

// True in CI (the CI environment variable set, other than "false" or "0").
inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && *ci && std::string(ci) != "false" && std::string(ci) != "0";
}

}  // namespace rw::test

// Ends the test when `missing` (what it needs and lacks, in words; empty: nothing) is not empty:
// a failure in CI, a skip elsewhere.
#define REWIND_REQUIRE(missing)                                                                \
  do {                                                                                         \
    if (const std::string why_ = (missing); !why_.empty()) {                                   \
      if (::rw::test::in_ci()) FAIL() << why_ << " (CI is set: this test must run, not skip)"; \
      GTEST_SKIP() << why_;                                                                    \
    }                                                                                          \
  } while (0)
