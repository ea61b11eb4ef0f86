#include "rewind/engine/constrained.h"

#include <cmath>

#include "rewind/sample/sampler.h"

namespace rw {

Status constrain_logits(GrammarAutomaton& automaton, int32_t state, float* row, int32_t n_vocab,
                        bool lazy_greedy, bool* masked, ThreadPool* pool, int32_t argmax_hint) {
  if (masked) *masked = false;
  if (state == GrammarAutomaton::kEnded || state == GrammarAutomaton::kDead)
    return make_error("grammar: no token may follow (the grammar has ended)");
  if (lazy_greedy) {
    const int32_t top = argmax_hint >= 0 ? argmax_hint : argmax(row, n_vocab);
    REWIND_TRY(const int32_t next, automaton.step_token(state, top));
    if (next != GrammarAutomaton::kDead) return Ok{};
  }
  const int32_t nv = automaton.vocab().n_vocab();
  REWIND_TRY_STATUS(automaton.mask_logits(state, row, pool));
  for (int32_t v = nv; v < n_vocab; ++v) row[v] = -INFINITY;
  if (masked) *masked = true;
  return Ok{};
}

}  // namespace rw
