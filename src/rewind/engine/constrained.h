// Constrained decoding in the engine (docs/ARCHITECTURE.md, "Constrained decoding"): a logits
// row is prepared with the sequence's grammar state before the sampler sees it, so that
// whatever the sampler picks from it is a token the grammar allows. The sampler itself is not
// changed: the order of adjustments is the request's logit adjustments, then this, then the
// sampler's temperature / top-k / top-p / min-p.
#pragma once

#include <cstdint>

#include "rewind/base/result.h"
#include "rewind/grammar/matcher.h"

namespace rw {

// Prepares row[0 .. n_vocab) for sampling in grammar state `state` (ids >= n_vocab are never
// sampled). With `lazy_greedy` (a greedy row whose log-probabilities nobody reads) the row is
// left as it is when its argmax is allowed: the masked row's argmax is then that same token
// (the lowest id among the maxima of all tokens is, when allowed, the lowest among the maxima
// of the allowed ones), so the mask is computed only when the model's own choice is refused.
// Otherwise every token the grammar refuses (and every id past the grammar's vocabulary) gets
// -infinity. *masked says whether the row was changed. `pool` (may be null) shares a mask's
// walk of the whole vocabulary (GrammarAutomaton::allowed). `argmax_hint` >= 0: argmax(row,
// n_vocab), already known (spares lazy_greedy its pass over the row). Errors: the grammar has
// ended or is dead, an automaton limit.
Status constrain_logits(GrammarAutomaton& automaton, int32_t state, float* row, int32_t n_vocab,
                        bool lazy_greedy, bool* masked = nullptr, ThreadPool* pool = nullptr,
                        int32_t argmax_hint = -1);

}  // namespace rw
