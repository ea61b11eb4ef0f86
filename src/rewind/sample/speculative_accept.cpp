#include "rewind/sample/speculative_accept.h"

#include <algorithm>
#include <vector>

namespace rw {

AcceptResult speculative_accept(Sampler& sampler, const float* logits, int64_t ld,
                                std::span<const int32_t> drafts, const float* draft_probs,
                                int64_t ld_q, int32_t n_vocab) {
  const int32_t k = static_cast<int32_t>(drafts.size());
  AcceptResult r;
  if (sampler.greedy()) {
    for (int32_t i = 0; i <= k; ++i) {
      const int32_t best = sampler.sample(logits + i * ld, n_vocab);
      if (i == k || best != drafts[i]) {
        r.accepted = i;
        r.next = best;
        return r;
      }
    }
  }
  for (int32_t i = 0; i < k; ++i) {
    std::vector<float> p = sampler.probabilities(logits + i * ld, n_vocab);
    const int32_t d = drafts[i];
    const float* q = draft_probs ? draft_probs + i * ld_q : nullptr;
    const double qd = q ? static_cast<double>(q[d]) : 1.0;
    const double pd = d >= 0 && d < n_vocab ? static_cast<double>(p[d]) : 0.0;  // never sampled
    const double u = sampler.uniform();
    if (u * qd < pd) continue;  // accepted: u < p(d) / q(d)
    // Rejected: draw from the residual max(0, p - q).
    if (q) {
      for (int32_t v = 0; v < n_vocab; ++v) p[v] = std::max(0.0f, p[v] - q[v]);
    } else if (d >= 0 && d < n_vocab) {
      p[d] = 0.0f;
    }
    bool any = false;
    for (int32_t v = 0; v < n_vocab && !any; ++v) any = p[v] > 0.0f;
    r.accepted = i;
    // An empty residual happens only when p == q up to rounding, where rejection itself had
    // probability ~0; the target's own distribution is then the right fallback.
    r.next = any ? sampler.draw(p.data(), n_vocab) : sampler.sample(logits + i * ld, n_vocab);
    return r;
  }
  r.accepted = k;
  r.next = sampler.sample(logits + k * ld, n_vocab);
  return r;
}

}  // namespace rw
