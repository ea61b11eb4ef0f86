// Runs tokens through a Model for the exactness tests: all-position logits fed in chunks, and a
// byte comparison of two logit vectors.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "rewind/model/model.h"

namespace rw::test {

// All-position logits of `tokens` from a fresh state, fed in chunks of `chunk` tokens.
inline std::vector<float> chunked_logits(Model& m, const std::vector<int32_t>& tokens,
                                         int64_t chunk, ThreadPool* pool) {
  SequenceState st = m.new_state();
  std::vector<float> all, part;
  for (size_t b = 0; b < tokens.size(); b += static_cast<size_t>(chunk)) {
    const size_t n = std::min(tokens.size() - b, static_cast<size_t>(chunk));
    SeqInput in{&st, std::span<const int32_t>(tokens.data() + b, n), {}};
    for (size_t i = 0; i < n; ++i) in.logit_rows.push_back(static_cast<int32_t>(i));
    Status s = m.forward(std::span<SeqInput>(&in, 1), &part, pool);
    if (!s.ok()) {
      ADD_FAILURE() << s.error_message();
      return {};
    }
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

// The same floats to the bit.
inline bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace rw::test
