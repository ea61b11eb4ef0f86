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
  if (text == "off") return StepTarget{};
  std::string num = text;
  bool factor = false;
  if (!num.empty() && num.back() == 'x') {
    factor = true;
    num.pop_back();
  } else if (num.size() > 2 && num.compare(num.size() - 2, 2, "ms") == 0) {
    num.resize(num.size() - 2);
  }
  // Digits with an optional fraction: no sign, exponent, hex or spaces.
  const size_t dot = num.find('.');
  const bool digits = !num.empty() && num.find_first_not_of("0123456789.") == std::string::npos &&
                      dot != 0 && dot != num.size() - 1 &&
                      (dot == std::string::npos || num.find('.', dot + 1) == std::string::npos);
  if (!digits) return make_error(bad + "'" + text + "'");
  const double v = std::strtod(num.c_str(), nullptr);
  StepTarget t;
  if (factor) {
    if (!(v > 1)) return make_error(bad + "the factor must be more than 1, got '" + text + "'");
    t.factor = v;
  } else if (v > 0) {
    t.ms = v;
  }  // 0 ms: off
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
  if (!(ms >= 0) || !std::isfinite(ms) || decode_tokens < 0 || prefill_tokens < 0 ||
      decode_tokens + prefill_tokens <= 0)
    return;
  const double d = static_cast<double>(decode_tokens), p = static_cast<double>(prefill_tokens);
  // Far slower than the line predicts: a thread descheduled, a snapshot, a publication.
  const bool slow =
      fit_ && ms > kSlowFactor * (fit_->decode_ms(decode_tokens) + fit_->prefill_ms_per_token * p);
  obs_[next_] = {d, p, ms, slow};
  next_ = (next_ + 1) % kWindow;
  if (count_ < kWindow) ++count_;
  if (auto f = refit()) fit_ = f;
}

namespace {

// Weighted least squares for ms = fixed + dec * d + pre * p over the given steps, with a small
// ridge pulling the fixed and per-decode terms towards `prior` (a direction the steps leave
// undetermined keeps the last line's value instead of drifting); a pinned term is held at 0.
std::optional<std::array<double, 3>> solve(const double (*x)[3], const double* ms, const double* wt,
                                           size_t n, const double prior[2], const bool pinned[2]) {
  double A[3][4] = {};
  double sw = 0, swdd = 0;
  for (size_t k = 0; k < n; ++k) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) A[i][j] += wt[k] * x[k][i] * x[k][j];
      A[i][3] += wt[k] * x[k][i] * ms[k];
    }
    sw += wt[k];
    swdd += wt[k] * x[k][1] * x[k][1];
  }
  constexpr double kRidge = 1e-2;
  const double ridge[2] = {kRidge * sw, kRidge * (swdd + sw)};
  for (int i = 0; i < 2; ++i) {
    A[i][i] += ridge[i];
    A[i][3] += ridge[i] * prior[i];
    if (pinned[i]) {  // held at 0: its column drops out, its row says x_i = 0
      for (int r = 0; r < 3; ++r) A[r][i] = A[i][r] = 0;
      A[i][i] = 1;
      A[i][3] = 0;
    }
  }
  // Gauss-Jordan elimination with partial pivoting.
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
  std::array<double, 3> beta{A[0][3] / A[0][0], A[1][3] / A[1][1], A[2][3] / A[2][2]};
  for (double v : beta)
    if (!std::isfinite(v)) return std::nullopt;
  return beta;
}

}  // namespace

std::optional<StepBudget::Fit> StepBudget::refit() const {
  if (count_ < kMinSteps) return std::nullopt;
  // The remembered steps, newest first, the newest weighing 1 and each older one 0.96 of the
  // next. Steps marked slow when they came are left out, unless a quarter of them are: then
  // the machine itself has slowed down and the line must follow.
  size_t n_slow = 0;
  for (size_t k = 0; k < count_; ++k) n_slow += obs_[k].slow;
  const bool drop_slow = 4 * n_slow < count_;
  double x[kWindow][3], ms[kWindow], decay[kWindow], wt[kWindow];
  bool any_prefill = false;
  double w = 1, mean_ms = 0;
  for (size_t k = 0; k < count_; ++k, w *= 0.96) {
    const Obs& o = obs_[(next_ + kWindow - 1 - k) % kWindow];
    x[k][0] = 1, x[k][1] = o.d, x[k][2] = o.p;
    ms[k] = o.ms;
    decay[k] = wt[k] = drop_slow && o.slow ? 0 : w;
    any_prefill |= o.p > 0 && decay[k] > 0;
    mean_ms += o.ms / static_cast<double>(count_);
  }
  if (!any_prefill) return std::nullopt;
  const double prior[2] = {fit_ ? fit_->fixed_ms : 0, fit_ ? fit_->decode_ms_per_token : 0};
  bool pinned[2] = {false, false};
  std::optional<std::array<double, 3>> beta;
  // A step that ran long (the thread descheduled, a snapshot, a cache publication) must not
  // bend the line: two passes of Huber weights, residuals beyond 2.5 robust standard
  // deviations weighing less. A negative fixed or per-decode cost is pinned at 0.
  for (int pass = 0; pass < 3; ++pass) {
    for (int tries = 0; tries < 3; ++tries) {
      beta = solve(x, ms, wt, count_, prior, pinned);
      if (!beta) return std::nullopt;
      bool again = false;
      for (int i = 0; i < 2; ++i)
        if ((*beta)[i] < 0 && !pinned[i]) pinned[i] = again = true;
      if (!again) break;
    }
    if (pass == 2) break;
    double r[kWindow], kept[kWindow];
    size_t n_kept = 0;
    for (size_t k = 0; k < count_; ++k) {
      r[k] = std::fabs(ms[k] - ((*beta)[0] + (*beta)[1] * x[k][1] + (*beta)[2] * x[k][2]));
      if (decay[k] > 0) kept[n_kept++] = r[k];
    }
    std::nth_element(kept, kept + n_kept / 2, kept + n_kept);  // n_kept > 0: a prefill step
    const double scale = std::max(1.4826 * kept[n_kept / 2], 1e-3 * mean_ms + 1e-9);
    for (size_t k = 0; k < count_; ++k)
      wt[k] = decay[k] * std::min(1.0, 2.5 * scale / std::max(r[k], 1e-300));
  }
  Fit f{(*beta)[0], (*beta)[1], (*beta)[2]};
  if (!(f.prefill_ms_per_token > 0)) return std::nullopt;
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
