// How many prefill tokens a step that also decodes may take, so that the decode rows'
// inter-token latency stays near a target. The step times measured so far fit a line
//   step ms = fixed + per_decode_token * d + per_prefill_token * p
// (least squares over the recent steps, older ones weighing less, so the fit follows the
// context's growth and the machine's load; steps far off the line weigh less, so one that ran
// long does not bend it; the fixed and per-decode costs are never negative); the budget is the
// p at which the line meets the target. A pure class fed by the caller's clock:
// tests/unit/step_budget_test.cpp drives it with synthetic timings.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "rewind/base/result.h"

namespace rw {

// What a step that decodes aims at: `ms` milliseconds, or `factor` times a step of its decode
// rows alone (the rows then run at no less than 1 / factor of their undisturbed rate, and a
// prefill chunk beside them pays the weights' stream once per factor - 1 of its own time).
// Neither set: off (a fixed budget, --mixed-chunk).
struct StepTarget {
  double ms = 0;
  double factor = 0;
  bool on() const { return ms > 0 || factor > 0; }
};

// "off" (or 0 ms), "N" / "Nms" (milliseconds) or "Nx" (times a decode-only step, more than
// 1); N is digits with an optional fraction.
Result<StepTarget> parse_step_target(const std::string& text);
std::string step_target_string(const StepTarget& t);  // the form parse_step_target reads

class StepBudget {
 public:
  static constexpr int64_t kFloorTokens = 16;  // a prompt beside decode rows always progresses
  static constexpr size_t kWindow = 64;        // steps the fit remembers
  static constexpr size_t kMinSteps = 4;       // fewer: no fit
  static constexpr double kSlowFactor = 3;     // a step this many times the line's time: left out

  explicit StepBudget(StepTarget target = {}) : target_(target) {}

  const StepTarget& target() const { return target_; }
  // One step's wall time with its decode tokens (rows and their drafts) and prefill tokens.
  void observe(int64_t decode_tokens, int64_t prefill_tokens, double ms);

  struct Fit {
    double fixed_ms = 0, decode_ms_per_token = 0, prefill_ms_per_token = 0;
    double decode_ms(int64_t d) const {
      return fixed_ms + decode_ms_per_token * static_cast<double>(d);
    }
  };
  // The line through the remembered steps, refitted by each observe(): nullopt until kMinSteps
  // steps, at least one with prefill tokens, have been seen; while the remembered steps hold
  // no prefill (a long stretch of decoding) or give no positive prefill cost, the last line.
  // Directions the steps leave undetermined (every step with the same decode tokens, or the
  // same chunk) keep the last line's fixed and per-decode costs (a small ridge towards them).
  const std::optional<Fit>& fit() const { return fit_; }

  // Prefill tokens for a step whose decode rows take `decode_tokens`: where the fitted line
  // meets the target, at least kFloorTokens; kFloorTokens without a fit yet (the first mixed
  // steps then cost little and teach the fit); nullopt when off.
  std::optional<int64_t> prefill_tokens(int64_t decode_tokens) const;

 private:
  struct Obs {
    double d = 0, p = 0, ms = 0;
    bool slow = false;  // kSlowFactor times the line's time when it came
  };
  std::optional<Fit> refit() const;  // the line through the remembered steps, if any
  StepTarget target_;
  std::array<Obs, kWindow> obs_{};
  size_t count_ = 0, next_ = 0;
  std::optional<Fit> fit_;
};

}  // namespace rw
