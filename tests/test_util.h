// Shared helpers for tests: paths of the test data and of the built binary, a seeded RNG,
// and a model cache so each test binary loads a fixture once.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "rewind/model/model.h"

namespace rw::test {

// Starts args[0] with args in a child process whose stdout and stderr go to `log`; the pid
// (<= 0 when fork failed). The child exits 127 when the program cannot be run.
inline pid_t spawn_logged(std::vector<std::string> args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

inline std::string data_dir() {
  return REWIND_TEST_DATA;
}
// The fixtures of tests/data: qwen35-tiny (Gated DeltaNet families) and mamba2-tiny
// (Granite-4.0-H, Nemotron-H, Nemotron-H with MoE blocks), each named by its model_type
// (nemotron_h_moe: model_type nemotron_h, GGUF architecture nemotron_h_moe).
inline std::string fixture_dir(const std::string& variant) {
  const bool mamba2 =
      variant == "granitemoehybrid" || variant == "nemotron_h" || variant == "nemotron_h_moe";
  return data_dir() + (mamba2 ? "/mamba2-tiny/" : "/qwen35-tiny/") + variant;
}
// The Qwen3.5 families' fixtures.
inline const std::vector<std::string>& fixture_variants() {
  static const std::vector<std::string> v = {"qwen3_5", "qwen3_5_moe", "qwen3_next"};
  return v;
}
// Every family's fixture: the exactness suites run over all of them.
inline const std::vector<std::string>& all_families() {
  static const std::vector<std::string> v = {"qwen3_5",          "qwen3_5_moe", "qwen3_next",
                                             "granitemoehybrid", "nemotron_h",  "nemotron_h_moe"};
  return v;
}

// Loaded once per (dir, store) per process.
inline Model& cached_model(const std::string& dir, WeightStore store = WeightStore::Auto) {
  static std::map<std::pair<std::string, int>, std::unique_ptr<Model>> cache;
  auto key = std::make_pair(dir, static_cast<int>(store));
  auto it = cache.find(key);
  if (it == cache.end()) {
    LoadOptions opt;
    opt.store = store;
    auto m = Model::load(dir, opt);
    if (!m.ok()) {
      std::fprintf(stderr, "cannot load %s: %s\n", dir.c_str(), m.error_message().c_str());
      std::abort();
    }
    it = cache.emplace(key, std::move(m).value()).first;
  }
  return *it->second;
}

inline std::vector<int32_t> random_tokens(std::mt19937_64& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return t;
}

// A path for scratch files of this test process: <tmp>/rewind_test_<pid>/<tag>. The whole
// per-process folder is removed when the process exits.
inline std::string scratch_dir(const std::string& tag) {
  struct Root {
    std::string path;
    ~Root() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Root root{(std::filesystem::temp_directory_path() /
                    ("rewind_test_" + std::to_string(static_cast<long>(::getpid()))))
                       .string()};
  std::filesystem::create_directories(root.path);
  return root.path + "/" + tag;
}

// scratch_dir(tag), created (an existing one is kept).
inline std::string made_scratch_dir(const std::string& tag) {
  const std::string p = scratch_dir(tag);
  std::filesystem::create_directories(p);
  return p;
}

// The bytes of a file ("" if it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Runs a shell command, returns its stdout; *rc gets the exit status.
inline std::string run_command(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    *rc = -1;
    return out;
  }
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

}  // namespace rw::test
