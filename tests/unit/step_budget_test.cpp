// The adaptive budget of a step that decodes beside a prefill, driven by synthetic step times.
#include "rewind/engine/step_budget.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace rw {
namespace {

StepTarget target(const char* text) {
  return parse_step_target(text).value();
}

// A machine whose step costs fixed + dec * d + pre * p milliseconds.
struct Line {
  double fixed, dec, pre;
  double operator()(int64_t d, int64_t p) const {
    return fixed + dec * static_cast<double>(d) + pre * static_cast<double>(p);
  }
};

// A serving pattern: decode-only steps, steps with a chunk beside them, prefill-only steps.
void feed(StepBudget& b, const Line& t, int steps, double noise = 0) {
  uint64_t s = 88172645463325252ull;
  for (int i = 0; i < steps; ++i) {
    const int64_t d = (i % 5 == 4) ? 0 : 4 + i % 5;          // 4-7 decode rows, or none
    const int64_t p = (i % 3 == 0) ? 0 : 32 + 37 * (i % 7);  // nothing, or a 32-254 chunk
    if (d == 0 && p == 0) continue;
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    const double u = static_cast<double>(s % 2001) / 1000.0 - 1.0;  // [-1, 1]
    b.observe(d, p, t(d, p) * (1 + noise * u));
  }
}

TEST(StepTarget, Parses) {
  EXPECT_FALSE(parse_step_target("off")->on());
  EXPECT_FALSE(parse_step_target("0")->on());
  EXPECT_EQ(parse_step_target("4x")->factor, 4);
  EXPECT_EQ(parse_step_target("2.5x")->factor, 2.5);
  EXPECT_EQ(parse_step_target("150")->ms, 150);
  EXPECT_EQ(parse_step_target("150ms")->ms, 150);
  EXPECT_EQ(parse_step_target("12.5")->ms, 12.5);
  for (const char* off : {"0", "0ms", "0.0", "00"})
    EXPECT_FALSE(parse_step_target(off)->on()) << off;
  for (const char* bad :
       {"",   "x",    "1x", "0.5x", "-3",  "abc", "4xx", "ms",   "12 ms", "nan", "inf", "-2x",
        "3y", "0x10", " 5", "5 ",   "1e3", "5.",  ".5",  "1..2", "1.2.3", "+4",  "4X"})
    EXPECT_FALSE(parse_step_target(bad).ok()) << bad;
  for (const char* t : {"off", "4x", "2.5x", "150ms"}) EXPECT_EQ(step_target_string(target(t)), t);
}

// On exact timings the fit recovers the line and the budget lands on the target.
TEST(StepBudget, ExactTimingsMeetTheTarget) {
  const Line t{8, 2.5, 1.25};
  StepBudget b(target("4x"));
  EXPECT_EQ(b.prefill_tokens(8), StepBudget::kFloorTokens);  // nothing measured yet
  feed(b, t, 40);
  const auto f = b.fit();
  ASSERT_TRUE(f.has_value());
  EXPECT_NEAR(f->fixed_ms, 8, 0.05);
  EXPECT_NEAR(f->decode_ms_per_token, 2.5, 0.01);
  EXPECT_NEAR(f->prefill_ms_per_token, 1.25, 0.001);
  // 8 decode tokens: 28 ms alone, so the step aims at 112 ms: (112 - 28) / 1.25 = 67.2.
  EXPECT_EQ(*b.prefill_tokens(8), 67);
  StepBudget ms(target("100"));
  feed(ms, t, 40);
  EXPECT_EQ(*ms.prefill_tokens(8), 57);  // (100 - 28) / 1.25 = 57.6
  // A target the decode rows alone already exceed leaves the floor.
  EXPECT_EQ(*ms.prefill_tokens(40), StepBudget::kFloorTokens);
}

TEST(StepBudget, NoisyTimingsLandNearTheTarget) {
  const Line t{8, 2.5, 1.25};
  StepBudget b(target("4x"));
  feed(b, t, 64, 0.1);
  const auto p = b.prefill_tokens(8);
  ASSERT_TRUE(p.has_value());
  EXPECT_NEAR(static_cast<double>(*p), 67.2, 67.2 * 0.25);
  EXPECT_LT(t(8, *p), 112 * 1.2);
}

// Only decode-only and prefill-only steps: the split between the fixed cost and the per-token
// costs is not determined; the budget errs towards fewer prefill tokens, never more.
TEST(StepBudget, UnderdeterminedFitsErrShort) {
  const Line t{20, 1, 1};
  StepBudget b(target("4x"));
  for (int i = 0; i < 16; ++i) {
    b.observe(8, 0, t(8, 0));
    b.observe(0, 512, t(0, 512));
  }
  const auto p = b.prefill_tokens(8);
  ASSERT_TRUE(p.has_value());
  const double exact = (4 * t(8, 0) - t(8, 0)) / t.pre;  // 84
  EXPECT_LE(static_cast<double>(*p), exact);
  EXPECT_GT(static_cast<double>(*p), exact * 0.8);
  // Every step with the same decode rows: the prediction at those rows still holds.
  StepBudget same(target("4x"));
  for (int i = 0; i < 32; ++i)
    same.observe(8, i % 2 ? 0 : 16 * (1 + i % 5), t(8, i % 2 ? 0 : 16 * (1 + i % 5)));
  ASSERT_TRUE(same.fit().has_value());
  EXPECT_NEAR(same.fit()->decode_ms(8), t(8, 0), 0.1);
  EXPECT_NEAR(*same.prefill_tokens(8), 84, 1);
}

// The fit forgets: when the machine slows down (a neighbour, a longer context) the budget follows.
TEST(StepBudget, FollowsAChangedMachine) {
  StepBudget b(target("150"));
  feed(b, Line{8, 2.5, 1.25}, 64);
  const int64_t before = *b.prefill_tokens(8);
  feed(b, Line{8, 2.5, 2.5}, 100);  // every remembered step from the new machine
  const int64_t after = *b.prefill_tokens(8);
  EXPECT_EQ(before, 97);  // (150 - 28) / 1.25
  EXPECT_EQ(after, 48);   // (150 - 28) / 2.5
}

// A long stretch of decoding pushes every prefill step out of the window: the last line that
// had one stays, rather than the floor.
TEST(StepBudget, KeepsTheLastLineThroughDecodeOnlyStretches) {
  const Line t{8, 2.5, 1.25};
  StepBudget b(target("4x"));
  feed(b, t, 40);
  for (size_t i = 0; i < 2 * StepBudget::kWindow; ++i) b.observe(8, 0, t(8, 0));
  ASSERT_TRUE(b.fit().has_value());
  EXPECT_NEAR(b.fit()->prefill_ms_per_token, 1.25, 0.025);
  EXPECT_NEAR(*b.prefill_tokens(8), 67, 2);
}

// Closed loop: each step takes the budget's chunk beside the same decode rows, so every step
// of a long prefill has one d and nearly one p. The line must not drift (the fixed cost leaking
// into the per-prefill cost would shrink the chunk, and in factor mode the target with it).
TEST(StepBudget, ClosedLoopWithConstantRowsHoldsTheTarget) {
  const Line t{10, 0.5, 0.5};
  StepBudget b(target("6x"));
  for (int i = 0; i < 8; ++i) b.observe(0, 512, t(0, 512));  // the prompt before, alone
  for (int i = 0; i < 8; ++i) b.observe(8, 0, t(8, 0));      // decoding alone
  const double exact = (6 * t(8, 0) - t(8, 0)) / t.pre;      // 140
  for (int i = 0; i < 300; ++i) {
    const int64_t p = *b.prefill_tokens(8);
    if (i >= 20) {
      EXPECT_NEAR(static_cast<double>(p), exact, exact * 0.05) << "step " << i;
    }
    b.observe(8, p, t(8, p));
  }
}

// A step that ran long (a descheduled thread) must not hand the next steps a huge chunk, on a
// model whose steps take a fraction of a millisecond, for a tight or the default target.
TEST(StepBudget, AStepThatRanLongDoesNotBendTheLine) {
  for (const char* tg : {"1.01x", "6x"}) {
    for (double outlier : {3.4, 14.7, 100.0}) {
      const Line t{0.1, 0.02, 0.002};
      StepBudget b(target(tg));
      for (int i = 0; i < 8; ++i) b.observe(0, 64, t(0, 64));
      for (int i = 0; i < 8; ++i) b.observe(2, 0, t(2, 0));
      const double factor = parse_step_target(tg)->factor;
      const double normal = std::max<double>((factor - 1) * t(2, 0) / t.pre,  // 350 / 0.7
                                             StepBudget::kFloorTokens);
      b.observe(2, 0, outlier);
      for (int i = 0; i < 2 * static_cast<int>(StepBudget::kWindow); ++i) {
        const int64_t p = *b.prefill_tokens(2);
        EXPECT_LE(static_cast<double>(p), 1.5 * normal + 1) << tg << " " << outlier << " " << i;
        b.observe(2, i % 3 ? p : 0, t(2, i % 3 ? p : 0));
      }
    }
  }
}

// Timings whose plain fit has a negative per-decode cost (more rows, a faster step: noise on a
// shared host) keep the costs non-negative, so a factor target never collapses to 0.
TEST(StepBudget, CostsAreNeverNegative) {
  StepBudget b(target("4x"));
  for (int i = 0; i < 32; ++i) {
    const int64_t d = 1 + i % 6, p = (i % 4) * 40;
    b.observe(d, p, 2.0 - 0.1 * static_cast<double>(d) + 0.01 * static_cast<double>(p));
  }
  ASSERT_TRUE(b.fit().has_value());
  EXPECT_GE(b.fit()->fixed_ms, 0);
  EXPECT_GE(b.fit()->decode_ms_per_token, 0);
  EXPECT_GT(b.fit()->decode_ms(6), 0);
  EXPECT_GT(*b.prefill_tokens(6), StepBudget::kFloorTokens);
}

// No budget without a target; the floor without enough steps or without any step that
// prefilled; bad observations ignored.
TEST(StepBudget, NoBudgetWithoutATargetTheFloorWithoutAFit) {
  StepBudget off;
  feed(off, Line{8, 2.5, 1.25}, 40);
  EXPECT_FALSE(off.prefill_tokens(8).has_value());
  EXPECT_TRUE(off.fit().has_value());
  StepBudget few(target("4x"));
  for (size_t i = 0; i + 1 < StepBudget::kMinSteps; ++i) few.observe(4, 64, 100);
  EXPECT_FALSE(few.fit().has_value());
  EXPECT_EQ(few.prefill_tokens(4), StepBudget::kFloorTokens);
  StepBudget decode_only(target("4x"));
  for (int i = 0; i < 20; ++i) decode_only.observe(1 + i % 4, 0, 10 + i % 4);
  EXPECT_FALSE(decode_only.fit().has_value());
  EXPECT_EQ(decode_only.prefill_tokens(4), StepBudget::kFloorTokens);

  StepBudget bad(target("4x"));
  for (int i = 0; i < 20; ++i) {
    bad.observe(4, 64, NAN);
    bad.observe(4, 64, -1);
    bad.observe(0, 0, 5);
    bad.observe(-5, 10, 5);
    bad.observe(4, -64, 5);
  }
  EXPECT_FALSE(bad.fit().has_value());
}

}  // namespace
}  // namespace rw
