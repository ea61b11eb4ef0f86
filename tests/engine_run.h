// Runs one request through an Engine for tests: the generated tokens, a copy of the final
// sequence state (for memcmp comparisons) and the report.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "rewind/engine/engine.h"

namespace rw::test {

struct Gen {
  std::vector<int32_t> out;
  SequenceState state;
  RequestReport rep;
};

inline Gen generate(Engine& e, const std::vector<int32_t>& prompt, int32_t max_tokens,
                    const SpecConfig& spec = {}) {
  Request r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.spec = spec;
  auto rep = e.generate(r);
  if (!rep.ok()) {
    ADD_FAILURE() << rep.error_message();
    return {{}, e.last_state() ? e.last_state()->clone() : SequenceState(StateShape{}), {}};
  }
  return {rep->tokens, e.last_state()->clone(), rep->report};
}

}  // namespace rw::test
