// Test helpers that copy a valid GGUF file with edits to its metadata and tensors (for the
// malformed-input tests of the GGUF model readers), and check a load's one-line error.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "rewind/io/gguf.h"
#include "rewind/model/model.h"

namespace rw::test {

using GgufKv = std::vector<std::pair<std::string, GgufValue>>;
struct GgufEditTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;
  std::vector<std::byte> data;  // shorter than the type and shape ask: zero-filled
};

// Writes `dst`: `src` with kv_edit and t_edit applied (either may be null); returns dst.
inline std::string rewrite_gguf(const std::string& src, const std::string& dst,
                                const std::function<void(GgufKv&)>& kv_edit,
                                const std::function<void(std::vector<GgufEditTensor>&)>& t_edit) {
  auto g = GgufFile::open(src);
  EXPECT_TRUE(g.ok()) << g.error_message();
  GgufKv kv;
  kv.emplace_back("general.architecture", *g->get("general.architecture"));
  for (auto& [k, v] : g->metadata())
    if (k != "general.architecture") kv.emplace_back(k, v);
  std::vector<GgufEditTensor> ts;
  for (auto& t : g->tensors())
    ts.push_back({t.name, t.type, t.ne, std::vector<std::byte>(t.data, t.data + t.nbytes)});
  if (kv_edit) kv_edit(kv);
  if (t_edit) t_edit(ts);
  std::vector<GgufTensorToWrite> tw;
  for (auto& t : ts) {
    GgufTensorToWrite w;
    w.name = t.name;
    w.type = t.type;
    w.ne = t.ne;
    const GgufEditTensor* tp = &t;
    w.fill = [tp](std::byte* out, size_t n) -> Status {
      std::memset(out, 0, n);
      std::memcpy(out, tp->data.data(), std::min(n, tp->data.size()));
      return Ok{};
    };
    tw.push_back(std::move(w));
  }
  Status st = write_gguf(dst, kv, tw);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return dst;
}

// Sets key k (appended when absent).
inline void kv_set(GgufKv& kv, const std::string& k, GgufValue v) {
  for (auto& [key, val] : kv)
    if (key == k) {
      val = std::move(v);
      return;
    }
  kv.emplace_back(k, std::move(v));
}
inline void kv_drop(GgufKv& kv, const std::string& k) {
  std::erase_if(kv, [&](const auto& e) { return e.first == k; });
}

// Loading `path` fails with one line that starts with the path and contains `what`.
inline void expect_load_error(const std::string& path, const std::string& what) {
  auto m = Model::load(path, LoadOptions{});
  ASSERT_FALSE(m.ok()) << "expected: " << what;
  const std::string msg = m.error_message();
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
}

}  // namespace rw::test
