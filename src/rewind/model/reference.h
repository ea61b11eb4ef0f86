// Naive reference model: the forward pass of docs/QWEN35.md section 3 in double precision,
// plain loops, one sequence at a time from an empty state, written independently of the fast
// kernels (it reads the same logical weights, model/weight_source.h, and kernels/ops_ref.h).
// Tests check the fast path against it within a tolerance. Slow: tiny models only. Qwen3.5
// families only (the Mamba2 families are checked against golden logits, tests/data/mamba2-tiny).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rewind/model/config.h"
#include "rewind/model/weight_source.h"

namespace rw {

class ReferenceModel {
 public:
  ReferenceModel(const ModelConfig& cfg, const WeightSet& ws);
  using Rows = std::vector<std::vector<double>>;  // [n][width]

  // Logits [n_tokens][vocab] for every position of `tokens`, starting from an empty state. If
  // `final_hidden` is given it receives the hidden states after the final norm (what lm_head
  // sees), [n_tokens][H].
  Rows forward(const std::vector<int32_t>& tokens, Rows* final_hidden = nullptr) const;

  // The MTP head (needs weights().has_mtp(); docs/QWEN35.md 2.5) over `tokens` from an empty
  // state: entry i = 0..n-2 pairs h_i (main hidden after the final norm at position i) with
  // t_{i+1}; returns its logits [n-1][vocab], the head's guess for t_{i+2}. `mtp_hidden`
  // receives the post-mtp.norm states [n-1][H] (the "hidden" input of a chained next step).
  Rows mtp_forward(const std::vector<int32_t>& tokens, Rows* mtp_hidden = nullptr) const;

  // The MTP head over explicit entries: entry i pairs hidden[i] (an [H] state: a main-model final
  // hidden state, or a previous MTP step's post-mtp.norm state when chaining) with next_tokens[i],
  // at RoPE position i; attention is causal over entries 0..i. For each entry: e =
  // RMSNorm(embed(next_tokens[i]); mtp.enorm), hn = RMSNorm(hidden[i]; mtp.hnorm), x = mtp.fc .
  // [e ; hn], then MTP decoder layer l{n_layer} (a full-attention layer with the family's FFN),
  // RMSNorm(mtp.norm), lm_head. Returns logits; `mtp_hidden` gets the post-mtp.norm states.
  Rows mtp_forward_entries(const Rows& hidden, const std::vector<int32_t>& next_tokens,
                           Rows* mtp_hidden = nullptr) const;

 private:
  struct Mat {
    int64_t rows = 0, cols = 0;
    std::vector<double> v;
  };
  const Mat& mat(const std::string& name) const;
  static void matvec(const Mat& m, const double* x, double* y);
  // One pre-norm residual decoder layer under canonical prefix `p` on all rows of x (in place):
  // mixer (GDN if `linear`, else gated full attention at positions 0..n-1), then the FFN.
  void decoder_layer(const std::string& p, bool linear, bool moe, Rows& x) const;
  void gdn_mixer(const std::string& p, const Rows& xn, Rows& mix) const;
  void attention_mixer(const std::string& p, const Rows& xn, Rows& mix) const;
  void swiglu(const std::string& p, const double* in, double* y) const;
  void ffn(const std::string& p, bool moe, const double* xn, double* f) const;
  const ModelConfig& cfg_;
  const WeightSet& ws_;
  mutable std::map<std::string, Mat> cache_;
};

}  // namespace rw
