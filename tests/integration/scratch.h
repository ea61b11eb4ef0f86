// A scratch directory per test process (removed when the program ends, after every suite's
// teardown, so after the servers are gone) and the tiny seeded model made in it once: what the
// tests that start `rewind serve` (REWIND_BINARY) share.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "test_util.h"

namespace rw::test {

inline const std::string& tmp_dir() {
  static const std::string d = [] {
    char tmpl[] = "/tmp/rewind_test_XXXXXX";
    const char* p = mkdtemp(tmpl);
    if (!p) std::abort();
    return std::string(p);
  }();
  return d;
}

class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(tmp_dir(), ec);
  }
};
[[maybe_unused]] inline ::testing::Environment* const kScratchCleanup =
    ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

// A fresh path in the scratch directory, its name ending in `name`.
inline std::string tmp_path(const std::string& name) {
  static std::atomic<int> n{0};
  return tmp_dir() + "/" + std::to_string(n++) + "_" + name;
}

// The tiny model (make-model --preset tiny), made once per test process.
inline const std::string& model_dir() {
  static const std::string d = [] {
    const std::string dir = tmp_dir() + "/tiny";
    int rc = 0;
    const std::string out = run_command(
        std::string(REWIND_BINARY) + " make-model --preset tiny --out " + dir + " 2>&1", &rc);
    if (rc != 0) {
      std::fprintf(stderr, "make-model failed: %s\n", out.c_str());
      std::abort();
    }
    return dir;
  }();
  return d;
}

}  // namespace rw::test
