// Naive reference model: the forward pass of ARCH-qwen35.md section 3 in double precision,
// plain loops, one sequence at a time from an empty state, written independently of the fast
// kernels (it reads the same logical weights, model/weight_source.h, and kernels/ops_ref.h).
// Tests check the fast path against it within a tolerance. Slow: tiny models only.
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
  // Logits [n_tokens][vocab] for every position of `tokens`, starting from an empty state.
  std::vector<std::vector<double>> forward(const std::vector<int32_t>& tokens) const;

 private:
  struct Mat {
    int64_t rows = 0, cols = 0;
    std::vector<double> v;
  };
  const Mat& mat(const std::string& name) const;
  static void matvec(const Mat& m, const double* x, double* y);
  const ModelConfig& cfg_;
  const WeightSet& ws_;
  mutable std::map<std::string, Mat> cache_;
};

}  // namespace rw
