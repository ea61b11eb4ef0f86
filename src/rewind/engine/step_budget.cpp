#include "rewind/engine/step_budget.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace rw {

Result<StepTarget> parse_step_target(const std::string& text) {
  const std::string bad =
      "a step target is off, N (milliseconds) or Nx (times a decode-only step): ";
  if (text == "off" || text == "0") return StepTarget{};
  std::string num = text;
  bool factor = false;
  if (!num.empty() && num.back() == 'x') {
    factor = true;
    num.pop_back();
  } else if (num.size() > 2 && num.compare(num.size() - 2, 2, "ms") == 0) {
    num.resize(num.size() - 2);
  }
  char* end = nullptr;
  const double v = num.empty() ? NAN : std::strtod(num.c_str(), &end);
  if (num.empty() || end != num.c_str() + num.size() || !std::isfinite(v))
    return make_error(bad + "'" + text + "'");
  StepTarget t;
  if (factor) {
    if (v <= 1) return make_error(bad + "the factor must be more than 1, got '" + text + "'");
    t.factor = v;
  } else {
    if (v <= 0) return make_error(bad + "the milliseconds must be more than 0, got '" + text + "'");
    t.ms = v;
  }
  return t;
}

std::string step_target_string(const StepTarget& t) {
  char buf[64];
  if (t.factor > 0)
    std::snprintf(buf, sizeof buf, "%gx", t.factor);
  else if (t.ms > 0)
    std::snprintf(buf, sizeof buf, "%gms", t.ms);
  else
    return "off";
  return buf;
}

void StepBudget::observe(int64_t decode_tokens, int64_t prefill_tokens, double ms) {
  if (!(ms >= 0) || !std::isfinite(ms) || decode_tokens + prefill_tokens <= 0) return;
  obs_[next_] = {static_cast<double>(decode_tokens), static_cast<double>(prefill_tokens), ms};
  next_ = (next_ + 1) % kWindow;
  if (count_ < kWindow) ++count_;
  if (auto f = refit()) fit_ = f;
}

std::optional<StepBudget::Fit> StepBudget::refit() const {
  if (count_ < kMinSteps) return std::nullopt;
  // Weighted normal equations over x = (1, d, p), the newest step weighing 1 and each older one
  // 0.96 of the next; a small ridge on the fixed and per-decode terms only.
  double A[3][4] = {};
  double w = 1, sw = 0, swdd = 0;
  bool any_prefill = false;
  for (size_t k = 0; k < count_; ++k, w *= 0.96) {
    const Obs& o = obs_[(next_ + kWindow - 1 - k) % kWindow];
    const double x[3] = {1, o.d, o.p};
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) A[i][j] += w * x[i] * x[j];
      A[i][3] += w * x[i] * o.ms;
    }
    sw += w;
    swdd += w * o.d * o.d;
    any_prefill |= o.p > 0;
  }
  if (!any_prefill) return std::nullopt;
  constexpr double kRidge = 1e-3;
  A[0][0] += kRidge * sw;
  A[1][1] += kRidge * (swdd + sw);
  // Gaussian elimination with partial pivoting.
  for (int c = 0; c < 3; ++c) {
    int piv = c;
    for (int r = c + 1; r < 3; ++r)
      if (std::fabs(A[r][c]) > std::fabs(A[piv][c])) piv = r;
    if (std::fabs(A[piv][c]) < 1e-12) return std::nullopt;
    if (piv != c)
      for (int j = 0; j < 4; ++j) std::swap(A[c][j], A[piv][j]);
    for (int r = 0; r < 3; ++r) {
      if (r == c) continue;
      const double f = A[r][c] / A[c][c];
      for (int j = c; j < 4; ++j) A[r][j] -= f * A[c][j];
    }
  }
  Fit f{A[0][3] / A[0][0], A[1][3] / A[1][1], A[2][3] / A[2][2]};
  if (!(f.prefill_ms_per_token > 0) || !std::isfinite(f.fixed_ms) ||
      !std::isfinite(f.decode_ms_per_token))
    return std::nullopt;
  return f;
}

std::optional<int64_t> StepBudget::prefill_tokens(int64_t decode_tokens) const {
  if (!target_.on()) return std::nullopt;
  const auto& f = fit_;
  if (!f) return kFloorTokens;
  const double decode = std::max(0.0, f->decode_ms(decode_tokens));
  const double target = target_.ms > 0 ? target_.ms : target_.factor * decode;
  const double p = (target - decode) / f->prefill_ms_per_token;
  constexpr double kMax = 1 << 30;
  if (!(p > static_cast<double>(kFloorTokens))) return kFloorTokens;
  return static_cast<int64_t>(std::min(p, kMax));
}

}  // namespace rw
