#include "rewind/sample/logit_adjust.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "rewind/base/check.h"

namespace rw {

bool has_logit_adjustments(const SamplingParams& p) {
  return !p.logit_bias.empty() || (p.repetition_penalty != 1.0f && p.repeat_last_n != 0) ||
         p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
}

Status check_logit_adjustments(const SamplingParams& p, int64_t n_vocab) {
  std::set<int32_t> seen;
  for (const auto& [t, b] : p.logit_bias) {
    if (t < 0 || t >= n_vocab)
      return make_error("logit_bias: token id " + std::to_string(t) + " out of range [0, " +
                        std::to_string(n_vocab) + ")");
    if (!seen.insert(t).second)
      return make_error("logit_bias: token id " + std::to_string(t) + " given twice");
    if (!std::isfinite(b)) return make_error("logit_bias: values must be finite");
  }
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0.0f)
    return make_error("repetition_penalty must be a finite number > 0");
  if (p.repeat_last_n < -1) return make_error("repeat_last_n must be >= -1");
  if (!std::isfinite(p.frequency_penalty) || !std::isfinite(p.presence_penalty))
    return make_error("frequency_penalty and presence_penalty must be finite");
  return Ok{};
}

LogitAdjuster::LogitAdjuster(const SamplingParams& p, std::span<const int32_t> context)
    : active_(has_logit_adjustments(p)),
      bias_(p.logit_bias),
      rep_(p.repetition_penalty),
      freq_(p.frequency_penalty),
      pres_(p.presence_penalty) {
  // The window is tracked only when the repetition penalty does something.
  window_ = rep_ != 1.0f ? (p.repeat_last_n < 0 ? -1 : p.repeat_last_n) : 0;
  if (!active_ || window_ == 0) return;
  const size_t n = context.size();
  const size_t keep = window_ < 0 ? n : std::min(n, static_cast<size_t>(window_));
  seq_.assign(context.end() - static_cast<std::ptrdiff_t>(keep), context.end());
  n_context_ = keep;
  for (int32_t t : seq_) ++win_[t];
}

void LogitAdjuster::apply(float* l, int32_t n_vocab) const {
  if (!active_) return;
  for (const auto& [t, b] : bias_)
    if (t >= 0 && t < n_vocab) l[t] += b;
  if (rep_ != 1.0f)
    for (const auto& [t, c] : win_)
      if (t >= 0 && t < n_vocab) l[t] = l[t] > 0.0f ? l[t] / rep_ : l[t] * rep_;
  if (freq_ != 0.0f || pres_ != 0.0f)
    for (const auto& [t, c] : gen_)
      if (t >= 0 && t < n_vocab) l[t] -= static_cast<float>(c) * freq_ + pres_;
}

void LogitAdjuster::adjust_rows(float* logits, int64_t ld, std::span<const int32_t> drafts,
                                int32_t n_vocab) {
  if (!active_) return;
  const int32_t k = static_cast<int32_t>(drafts.size());
  for (int32_t i = 0; i <= k; ++i) {
    apply(logits + i * ld, n_vocab);
    if (i < k) push(drafts[i]);
  }
  pop(k);
}

void LogitAdjuster::push(int32_t t) {
  if (!active_) return;
  seq_.push_back(t);
  ++gen_[t];
  if (window_ == 0) return;
  ++win_[t];
  // The token that left the window.
  if (window_ > 0 && seq_.size() > static_cast<size_t>(window_)) {
    const int32_t out = seq_[seq_.size() - 1 - static_cast<size_t>(window_)];
    if (--win_[out] == 0) win_.erase(out);
  }
}

void LogitAdjuster::pop(int32_t n) {
  if (!active_) return;
  REWIND_CHECK(n >= 0 && n <= generated());
  for (int32_t i = 0; i < n; ++i) {
    const int32_t t = seq_.back();
    if (window_ != 0) {
      // The token that comes back into the window.
      if (window_ > 0 && seq_.size() > static_cast<size_t>(window_))
        ++win_[seq_[seq_.size() - 1 - static_cast<size_t>(window_)]];
      if (--win_[t] == 0) win_.erase(t);
    }
    if (--gen_[t] == 0) gen_.erase(t);
    seq_.pop_back();
  }
}

int32_t LogitAdjuster::count(int32_t token) const {
  auto it = gen_.find(token);
  return it == gen_.end() ? 0 : it->second;
}

int32_t LogitAdjuster::window_count(int32_t token) const {
  auto it = win_.find(token);
  return it == win_.end() ? 0 : it->second;
}

}  // namespace rw
