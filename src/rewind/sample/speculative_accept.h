// Acceptance of a speculative round's drafts against the target's logits.
//
// Greedy (temperature <= 0): draft i is accepted while it equals the target's argmax at row i;
// the next token is the argmax of the first row not accepted (or of row k when all are). The
// output is therefore token for token what plain greedy decoding gives.
//
// Sampling: standard speculative rejection sampling, which leaves the target distribution
// unchanged. With p_i the target's filtered distribution at row i (Sampler::probabilities:
// temperature, top-k, top-p, min-p) and q_i the draft's (one-hot at the draft token when the
// drafter is deterministic: n-gram lookup, greedy drafts), draft d_i is accepted with
// probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection the next token is drawn from
// the residual max(0, p_i - q_i) (normalised); when all k are accepted the next token is drawn
// from p_k. Each accept test and each draw takes one uniform from the sequence's sampler.
#pragma once

#include <cstdint>
#include <span>

#include "rewind/sample/sampler.h"

namespace rw {

struct AcceptResult {
  int32_t accepted = 0;  // m: drafts accepted (0..k)
  int32_t next = -1;     // the token after them (from row m)
};

// logits: k+1 rows of n_vocab floats (row stride ld >= n_vocab); drafts: k tokens (< n_vocab);
// draft_probs: null (deterministic drafts) or k rows of n_vocab probabilities (stride ld_q).
AcceptResult speculative_accept(Sampler& sampler, const float* logits, int64_t ld,
                                std::span<const int32_t> drafts, const float* draft_probs,
                                int64_t ld_q, int32_t n_vocab);

}  // namespace rw
