// Token sampling from logits: greedy, temperature, top-k, top-p, min-p, with a seeded RNG.
// Deterministic for a seed: the same logits and the same seed give the same token on every
// machine (the RNG is a fixed algorithm, not std:: distributions whose output is unspecified).
//
// RNG: xoshiro256** seeded by four splitmix64 outputs of `seed`; a uniform double takes the top
// 53 bits. Scaling, softmax and the cumulative sums are in double. NaN logits count as -inf.
// A row that is all -inf/NaN yields token 0 (what argmax gives). Ties in ordering (argmax,
// top-k, top-p) go to the lowest token id. Not thread-safe: one Sampler per sequence.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace rw {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy (argmax, lowest id wins ties)
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off (keep tokens with p >= min_p * p_max)
  uint64_t seed = 0;
  // Logit adjustments (sample/logit_adjust.h), applied to a row before the filters above by
  // the sequence's LogitAdjuster, never by the Sampler; neutral values turn each one off.
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, added to its logit), ids unique
  float repetition_penalty = 1.0f;  // llama.cpp's: over the last repeat_last_n tokens
  int32_t repeat_last_n = 64;       // its window, prompt tokens included; -1: the whole sequence
  float frequency_penalty = 0.0f;   // OpenAI's: minus f x count in the generated tokens
  float presence_penalty = 0.0f;    // OpenAI's: minus p once a token has been generated
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Picks a token from logits[0..n_vocab). Filters apply in the order: temperature scaling,
  // top-k, top-p, min-p; then one draw. Advances the RNG only when not greedy, and then by
  // exactly one draw per call. top-p keeps the smallest prefix of the sorted distribution whose
  // mass reaches top_p (at least one token); min-p keeps p >= min_p * p_max of what is left.
  // Cost: one vector pass for the maximum; with top-k, one pass that skips blocks holding
  // nothing better than the k kept so far, and k exponentials; else a vectorised exponential
  // per token, drawn from directly (temperature, min-p) or through a candidate list bucketed
  // by weight with one bucket sorted (top-p). Timings: bench/sampler_bench.
  int32_t sample(const float* logits, int32_t n_vocab);
  // The probabilities actually sampled from (after all filters), for tests and logprobs:
  // n_vocab entries summing to 1 (one-hot at argmax when greedy).
  std::vector<float> probabilities(const float* logits, int32_t n_vocab) const;
  const SamplingParams& params() const { return p_; }
  bool greedy() const { return p_.temperature <= 0.0f; }
  // One uniform draw in [0, 1) from this sampler's RNG (speculative acceptance tests).
  double uniform() { return next_uniform(); }
  // Draws an index from weights w[0..n) (non-negative, not all zero; need not sum to 1) with
  // one uniform draw; the last positive index if rounding leaves the draw past the total.
  int32_t draw(const float* w, int32_t n);

 private:
  struct Candidate {
    int32_t id;
    double z;  // logit / temperature
    double w;  // exp(z - z_max), unnormalised probability
  };
  // The tokens that survive the filters, sorted by id, with their weights; sum of w in *total.
  void filter(const float* logits, int32_t n_vocab, std::vector<Candidate>& out,
              double* total) const;

  SamplingParams p_;
  uint64_t s_[4];  // xoshiro256** state
  std::vector<Candidate> scratch_;
  std::vector<double> weights_;  // sample's temperature-only path
  uint64_t next_u64();
  double next_uniform();  // [0, 1)
};

// Index of the largest value (NaN counts as -inf; lowest index on ties; 0 when all are -inf
// or NaN). Precondition: n > 0.
int32_t argmax(const float* v, int32_t n);

// The sampler's e^x for x <= 0 (its weights e^(z - z_max)): a fixed algorithm within a few ulps
// of std::exp, 0 below -708. Exposed for its test.
double sampler_exp_weight(double x);

}  // namespace rw
