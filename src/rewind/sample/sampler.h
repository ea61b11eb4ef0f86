// Token sampling from logits: greedy, temperature, top-k, top-p, min-p, with a seeded RNG.
// Deterministic for a seed: the same logits and the same seed give the same token on every
// machine (the RNG is a fixed algorithm, not std:: distributions whose output is unspecified).
#pragma once

#include <cstdint>
#include <vector>

namespace rw {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy (argmax, lowest id wins ties)
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off (keep tokens with p >= min_p * p_max)
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Picks a token from logits[0..n_vocab). Filters apply in the order: temperature scaling,
  // top-k, top-p, min-p; then one draw. Advances the RNG only when not greedy.
  int32_t sample(const float* logits, int32_t n_vocab);
  // The probabilities actually sampled from (after all filters), for tests and logprobs.
  std::vector<float> probabilities(const float* logits, int32_t n_vocab) const;
  const SamplingParams& params() const { return p_; }

 private:
  SamplingParams p_;
  uint64_t state_;
  double next_uniform();  // [0, 1)
};

int32_t argmax(const float* v, int32_t n);

}  // namespace rw
