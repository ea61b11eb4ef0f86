// Logit adjustments that depend on the request and on what the sequence has produced so far:
// logit_bias (OpenAI), the repetition penalty (llama.cpp's) and the frequency and presence
// penalties (OpenAI's). They change the target distribution itself, so they run on a logit row
// before any filter (temperature, top-k, top-p, min-p) and before a grammar's mask, and
// speculative acceptance compares drafts against the adjusted rows.
//
// For a row, in this order (llama.cpp's: the bias first, then the penalties):
//   1. l[t] += bias[t]                                     for every logit_bias entry;
//   2. l[t] = l[t] > 0 ? l[t] / r : l[t] * r               for t among the last repeat_last_n
//      tokens of the sequence (prompt tokens included, as llama.cpp's server counts them; -1:
//      the whole sequence, 0: none), each such token once however often it occurs;
//   3. l[t] -= count[t] * frequency + (count[t] > 0) * presence
//      with count[t] the occurrences of t among the GENERATED tokens only (OpenAI's
//      definition; a prompt token costs nothing until the model repeats it).
// Everything is float arithmetic on the row's own values, so a row's result depends only on its
// sequence (batch invariance) and is the same on every machine.
//
// The state is per sequence and follows its generated tokens exactly: push() one token as it is
// emitted, pop() to undo (rejected speculative drafts). A speculative round adjusts verify row i
// after pushing drafts 1..i and pops them again before acceptance (adjust_rows).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "rewind/base/result.h"
#include "rewind/sample/sampler.h"

namespace rw {

// Whether `p` asks for any adjustment (a bias entry, a penalty that is not neutral).
bool has_logit_adjustments(const SamplingParams& p);
// Errors: a bias id outside [0, n_vocab) or given twice, a value that is not finite, a
// repetition penalty <= 0, repeat_last_n < -1.
Status check_logit_adjustments(const SamplingParams& p, int64_t n_vocab);

class LogitAdjuster {
 public:
  // `context`: the tokens before the first generated one (the prompt). Only its last
  // repeat_last_n tokens are kept. Cost: O(min(context, repeat_last_n)).
  LogitAdjuster(const SamplingParams& p, std::span<const int32_t> context);

  bool active() const { return active_; }
  // Adjusts logits[0..n_vocab) in place (ids >= n_vocab are skipped). Cost: O(distinct tokens
  // in the window and in the reply + bias entries); nothing when inactive.
  void apply(float* logits, int32_t n_vocab) const;
  // Adjusts the k+1 rows of a speculative verify (stride ld): row i as it will be sampled after
  // drafts[0..i) are accepted. The state is unchanged on return.
  void adjust_rows(float* logits, int64_t ld, std::span<const int32_t> drafts, int32_t n_vocab);
  void push(int32_t token);  // a generated token
  void pop(int32_t n = 1);   // undoes the last n push() calls (precondition: n <= generated())

  int64_t generated() const { return static_cast<int64_t>(seq_.size() - n_context_); }
  int32_t count(int32_t token) const;         // occurrences among the generated tokens
  int32_t window_count(int32_t token) const;  // occurrences in the repetition window

 private:
  bool active_ = false;
  std::vector<std::pair<int32_t, float>> bias_;
  float rep_ = 1.0f, freq_ = 0.0f, pres_ = 0.0f;
  int64_t window_ = 0;        // -1: unbounded
  std::vector<int32_t> seq_;  // the context's tail, then the generated tokens
  size_t n_context_ = 0;
  std::unordered_map<int32_t, int32_t> gen_, win_;  // counts > 0 only
};

}  // namespace rw
