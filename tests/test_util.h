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
#include <tuple>
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

// KV cache types: F32 (what the golden tests and the fp64 references use), and every type the
// exactness suites run over (the invariants hold for each: values are rounded once, when
// written).
inline constexpr KvTypes kF32Kv = {DType::F32, DType::F32};
inline const std::vector<KvTypes>& all_kv_types() {
  static const std::vector<KvTypes> v = {kF32Kv,
                                         {DType::BF16, DType::BF16},
                                         {DType::F16, DType::F16},
                                         {DType::Q8_0, DType::Q8_0},
                                         {DType::F16, DType::Q8_0}};
  return v;
}
inline std::string kv_name(const KvTypes& t) {
  return std::string(kv_type_name(t.k)) + "_" + kv_type_name(t.v);
}

// Loaded once per (dir, store, KV types) per process.
inline Model& cached_model(const std::string& dir, WeightStore store = WeightStore::Auto,
                           KvTypes kv = kF32Kv) {
  static std::map<std::tuple<std::string, int, int, int>, std::unique_ptr<Model>> cache;
  auto key =
      std::make_tuple(dir, static_cast<int>(store), static_cast<int>(kv.k), static_cast<int>(kv.v));
  auto it = cache.find(key);
  if (it == cache.end()) {
    LoadOptions opt;
    opt.store = store;
    opt.kv_types = kv;
    auto m = Model::load(dir, opt);
    if (!m.ok()) {
      std::fprintf(stderr, "cannot load %s: %s\n", dir.c_str(), m.error_message().c_str());
      std::abort();
    }
    it = cache.emplace(key, std::move(m).value()).first;
  }
  return *it->second;
}

// Parameters of the exactness suites that run over families (or presets) and KV cache types:
// "FAMILY:K_V" ("qwen3_5:f16_f16"); a plain "FAMILY" means F32 KV.
inline std::string param_family(const std::string& p) {
  return p.substr(0, p.find(':'));
}
inline KvTypes param_kv(const std::string& p) {
  const size_t c = p.find(':');
  if (c == std::string::npos) return kF32Kv;
  const std::string kv = p.substr(c + 1);
  const size_t u = kv.find('_', kv.rfind("q8_0", 0) == 0 ? 4 : 0);
  KvTypes t;
  if (u == std::string::npos || !parse_kv_type(kv.substr(0, u), &t.k) ||
      !parse_kv_type(kv.substr(u + 1), &t.v)) {
    std::fprintf(stderr, "bad test parameter %s\n", p.c_str());
    std::abort();
  }
  return t;
}
// Every name in `names` with each of the KV types the suites run over: F32, BF16, F16 and
// Q8_0 for K and V alike.
inline std::vector<std::string> with_kv_types(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const std::string& n : names)
    for (const KvTypes& t : all_kv_types())
      if (t.k == t.v) out.push_back(n + ":" + kv_name(t));
  return out;
}
// A gtest name for such a parameter ("qwen3_5_kv_f16_f16").
inline std::string param_name(const std::string& p) {
  std::string s = p;
  const size_t c = s.find(':');
  if (c != std::string::npos) s.replace(c, 1, "_kv_");
  for (char& ch : s)
    if (ch == '-' || ch == '.') ch = '_';
  return s;
}
// The fixture of a "FAMILY:K_V" parameter in its KV types.
inline Model& param_model(const std::string& p) {
  return cached_model(fixture_dir(param_family(p)), WeightStore::Auto, param_kv(p));
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

// Writes `bytes` to a file, replacing it.
inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
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
