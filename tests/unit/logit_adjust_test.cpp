// Logit adjustments (sample/logit_adjust.h): each adjustment and their composition against a
// naive reference recomputed from the token lists, bit for bit, through random pushes and pops
// (speculative rollback); the speculative verify rows; and chi-square goodness-of-fit of the
// sampler on adjusted rows (fixed seeds: deterministic), which the unadjusted distribution fails.
#include "rewind/sample/logit_adjust.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "rewind/sample/speculative_accept.h"

namespace rw {
namespace {

// The definition, from scratch: bias, then the repetition penalty over the last repeat_last_n
// tokens of context + generated (each distinct token once), then frequency and presence over
// the generated tokens.
std::vector<float> reference(const SamplingParams& p, const std::vector<int32_t>& context,
                             const std::vector<int32_t>& generated, std::vector<float> l) {
  for (const auto& [t, b] : p.logit_bias) l[t] += b;
  std::vector<int32_t> all = context;
  all.insert(all.end(), generated.begin(), generated.end());
  const size_t n = all.size();
  const size_t w = p.repeat_last_n < 0 ? n : std::min(n, static_cast<size_t>(p.repeat_last_n));
  std::set<int32_t> window(all.end() - static_cast<std::ptrdiff_t>(w), all.end());
  if (p.repetition_penalty != 1.0f)
    for (int32_t t : window)
      l[t] = l[t] > 0.0f ? l[t] / p.repetition_penalty : l[t] * p.repetition_penalty;
  std::map<int32_t, int> count;
  for (int32_t t : generated) ++count[t];
  for (const auto& [t, c] : count)
    l[t] -= static_cast<float>(c) * p.frequency_penalty + p.presence_penalty;
  return l;
}

std::vector<float> random_row(std::mt19937& rng, int32_t V) {
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> l(static_cast<size_t>(V));
  for (auto& x : l) x = d(rng);
  return l;
}

SamplingParams penalties(float rep, int32_t last_n, float freq, float pres,
                         std::vector<std::pair<int32_t, float>> bias = {}) {
  SamplingParams p;
  p.repetition_penalty = rep;
  p.repeat_last_n = last_n;
  p.frequency_penalty = freq;
  p.presence_penalty = pres;
  p.logit_bias = std::move(bias);
  return p;
}

TEST(LogitAdjust, NeutralParamsChangeNothing) {
  SamplingParams p;
  EXPECT_FALSE(has_logit_adjustments(p));
  p.repeat_last_n = 0;
  p.repetition_penalty = 1.3f;  // a window of 0 tokens: off
  EXPECT_FALSE(has_logit_adjustments(p));
  LogitAdjuster a(SamplingParams{}, std::vector<int32_t>{1, 2, 3});
  std::vector<float> l = {1, -2, 3, 0.5f};
  const auto before = l;
  a.push(2);
  a.apply(l.data(), 4);
  EXPECT_EQ(l, before);
}

TEST(LogitAdjust, EachAdjustmentKnownValues) {
  const std::vector<int32_t> ctx = {5, 5, 1};
  {  // logit_bias: added as given.
    LogitAdjuster a(penalties(1, 64, 0, 0, {{2, 100.0f}, {3, -1.5f}}), ctx);
    std::vector<float> l = {0, 0, 0.25f, 1, 0, 0};
    a.apply(l.data(), 6);
    EXPECT_EQ(l, (std::vector<float>{0, 0, 100.25f, -0.5f, 0, 0}));
  }
  {  // repetition: divides positive logits, multiplies the others, once per distinct token
     // in the window (prompt included).
    LogitAdjuster a(penalties(2, 64, 0, 0), ctx);
    std::vector<float> l = {1, -1, 1, 1, 1, 3};
    a.apply(l.data(), 6);
    EXPECT_EQ(l, (std::vector<float>{1, -2, 1, 1, 1, 1.5f}));
  }
  {  // frequency and presence: generated tokens only; the prompt's 5 and 1 cost nothing.
    LogitAdjuster a(penalties(1, 64, 0.25f, 0.5f), ctx);
    a.push(3);
    a.push(3);
    a.push(1);
    std::vector<float> l = {0, 0, 0, 0, 0, 0};
    a.apply(l.data(), 6);
    EXPECT_EQ(l, (std::vector<float>{0, -0.75f, 0, -1.0f, 0, 0}));
    EXPECT_EQ(a.count(3), 2);
    EXPECT_EQ(a.count(5), 0);
  }
  {  // The window: with repeat_last_n 2 only the last two tokens count.
    LogitAdjuster a(penalties(2, 2, 0, 0), ctx);
    EXPECT_EQ(a.window_count(5), 1);
    a.push(4);
    EXPECT_EQ(a.window_count(5), 0);
    EXPECT_EQ(a.window_count(1), 1);
    a.pop();
    EXPECT_EQ(a.window_count(5), 1);
    EXPECT_EQ(a.window_count(4), 0);
  }
}

// Random prompts, pushes and pops: after every change the adjusted row equals the reference's
// bits, for each adjustment alone and all together, with windows shorter and longer than the
// prompt and unbounded.
TEST(LogitAdjust, MatchesReferenceThroughPushAndPop) {
  constexpr int32_t kV = 24;
  std::mt19937 rng(7);
  const std::vector<SamplingParams> cases = {
      penalties(1.0f, 64, 0.0f, 0.0f, {{0, 3.0f}, {7, -100.0f}, {23, 0.5f}}),
      penalties(1.3f, 8, 0.0f, 0.0f),
      penalties(0.7f, -1, 0.0f, 0.0f),
      penalties(1.0f, 64, 0.4f, 0.0f),
      penalties(1.0f, 64, 0.0f, -0.9f),
      penalties(1.5f, 5, 0.3f, 0.6f, {{3, 2.0f}, {4, -2.0f}}),
  };
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const SamplingParams& p = cases[ci];
    for (int trial = 0; trial < 20; ++trial) {
      std::uniform_int_distribution<int32_t> tok(0, kV - 1);
      std::vector<int32_t> ctx(static_cast<size_t>(std::uniform_int_distribution<int>(1, 12)(rng)));
      for (auto& t : ctx) t = tok(rng);
      LogitAdjuster a(p, ctx);
      ASSERT_TRUE(a.active());
      std::vector<int32_t> gen;
      for (int op = 0; op < 60; ++op) {
        if (!gen.empty() && rng() % 3 == 0) {
          const int32_t n =
              std::uniform_int_distribution<int32_t>(1, static_cast<int32_t>(gen.size()))(rng);
          a.pop(n);
          gen.resize(gen.size() - static_cast<size_t>(n));
        } else {
          const int32_t t = tok(rng);
          a.push(t);
          gen.push_back(t);
        }
        ASSERT_EQ(a.generated(), static_cast<int64_t>(gen.size()));
        const std::vector<float> row = random_row(rng, kV);
        std::vector<float> got = row;
        a.apply(got.data(), kV);
        const std::vector<float> want = reference(p, ctx, gen, row);
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * kV))
            << "case " << ci << " trial " << trial << " op " << op;
      }
    }
  }
}

// Verify rows: row i is adjusted as if drafts[0..i) had been generated; the state is unchanged.
TEST(LogitAdjust, AdjustRowsAdvancesPerDraftAndRestores) {
  constexpr int32_t kV = 10;
  const SamplingParams p = penalties(1.4f, 4, 0.5f, 0.25f, {{9, 1.0f}});
  const std::vector<int32_t> ctx = {1, 2, 3};
  LogitAdjuster a(p, ctx);
  a.push(4);
  const std::vector<int32_t> drafts = {4, 5, 4};
  std::mt19937 rng(3);
  std::vector<float> rows;
  for (int i = 0; i < 4; ++i) {
    auto r = random_row(rng, kV);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  std::vector<float> got = rows;
  a.adjust_rows(got.data(), kV, drafts, kV);
  std::vector<int32_t> gen = {4};
  for (int i = 0; i < 4; ++i) {
    const std::vector<float> row(rows.begin() + i * kV, rows.begin() + (i + 1) * kV);
    const auto want = reference(p, ctx, gen, row);
    EXPECT_EQ(0, std::memcmp(got.data() + i * kV, want.data(), sizeof(float) * kV)) << i;
    if (i < 3) gen.push_back(drafts[static_cast<size_t>(i)]);
  }
  EXPECT_EQ(a.generated(), 1);
  EXPECT_EQ(a.count(4), 1);
  EXPECT_EQ(a.count(5), 0);
}

std::vector<double> softmax(const std::vector<float>& l) {
  double mx = -1e300, s = 0;
  for (float x : l) mx = std::max(mx, static_cast<double>(x));
  std::vector<double> p(l.size());
  for (size_t i = 0; i < l.size(); ++i) s += (p[i] = std::exp(static_cast<double>(l[i]) - mx));
  for (auto& x : p) x /= s;
  return p;
}

double chi2(const std::vector<int64_t>& obs, const std::vector<double>& p, int64_t n) {
  double c = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * static_cast<double>(n);
    if (e > 0)
      c += (obs[i] - e) * (obs[i] - e) / e;
    else if (obs[i] > 0)
      c += 1e300;  // a draw the distribution forbids
  }
  return c;
}

// 7 degrees of freedom (8 tokens): P(chi2 > 56) is about 1e-9. The seeds are fixed, so the
// tests are deterministic; the threshold only has to separate right from wrong.
constexpr double kChi2Limit = 56.0;
constexpr int32_t kV = 8;
const std::vector<float> kRow = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, 1.5f, -1.0f, 0.25f};
const std::vector<int32_t> kContext = {4, 4, 1, 6};
const std::vector<int32_t> kGenerated = {4, 5, 5, 0};

struct Fit {
  double adjusted, unadjusted;
};

// Samples n tokens at temperature 1 from the row adjusted by p (after kGenerated) and measures
// the fit against the reference's adjusted softmax and against the plain softmax.
Fit fit(const SamplingParams& p, uint64_t seed) {
  LogitAdjuster a(p, kContext);
  for (int32_t t : kGenerated) a.push(t);
  SamplingParams sp = p;
  sp.temperature = 1.0f;
  sp.seed = seed;
  Sampler s(sp);
  constexpr int64_t n = 40000;
  std::vector<int64_t> count(kV, 0);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> l = kRow;
    a.apply(l.data(), kV);
    ++count[static_cast<size_t>(s.sample(l.data(), kV))];
  }
  return {chi2(count, softmax(reference(p, kContext, kGenerated, kRow)), n),
          chi2(count, softmax(kRow), n)};
}

TEST(LogitAdjust, PenalisedSamplingFitsChiSquare) {
  for (const SamplingParams& p :
       {penalties(1.0f, 64, 0.6f, 0.0f), penalties(1.0f, 64, 0.0f, 0.8f),
        penalties(2.0f, 64, 0.0f, 0.0f), penalties(1.5f, 3, 0.3f, 0.4f)}) {
    const Fit f = fit(p, 11);
    EXPECT_LT(f.adjusted, kChi2Limit);
    // The same draws fail against the distribution without the penalties.
    EXPECT_GT(f.unadjusted, kChi2Limit);
  }
}

TEST(LogitAdjust, BiasedSamplingFitsChiSquare) {
  const Fit f = fit(penalties(1.0f, 64, 0.0f, 0.0f, {{6, 2.5f}, {4, -1.0f}}), 12);
  EXPECT_LT(f.adjusted, kChi2Limit);
  EXPECT_GT(f.unadjusted, kChi2Limit);
  // A bias of -100 removes a token in practice, +100 forces one.
  SamplingParams ban = penalties(1.0f, 64, 0.0f, 0.0f, {{4, -100.0f}});
  LogitAdjuster a(ban, {});
  ban.temperature = 1.0f;
  Sampler s(ban);
  for (int i = 0; i < 2000; ++i) {
    std::vector<float> l = kRow;
    a.apply(l.data(), kV);
    ASSERT_NE(s.sample(l.data(), kV), 4);
  }
  LogitAdjuster force(penalties(1.0f, 64, 0.0f, 0.0f, {{6, 100.0f}}), {});
  for (int i = 0; i < 2000; ++i) {
    std::vector<float> l = kRow;
    force.apply(l.data(), kV);
    ASSERT_EQ(s.sample(l.data(), kV), 6);
  }
}

// Speculative acceptance on adjusted rows keeps the adjusted distribution: the first emitted
// token of a round with a deterministic draft follows the adjusted row 0, the draft being the
// unadjusted row's argmax (what a drafter that ignores the penalties proposes).
TEST(LogitAdjust, SpeculativeAcceptanceFollowsAdjustedTarget) {
  const SamplingParams p = penalties(1.8f, 64, 0.5f, 0.5f, {{2, 1.0f}});
  LogitAdjuster a(p, kContext);
  for (int32_t t : kGenerated) a.push(t);
  SamplingParams sp = p;
  sp.temperature = 1.0f;
  sp.seed = 5;
  Sampler s(sp);
  const int32_t draft = 4;  // argmax of kRow
  std::vector<int32_t> drafts = {draft};
  constexpr int64_t n = 40000;
  std::vector<int64_t> count(kV, 0);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> rows = kRow;
    rows.insert(rows.end(), kRow.begin(), kRow.end());
    a.adjust_rows(rows.data(), kV, drafts, kV);
    const AcceptResult r = speculative_accept(s, rows.data(), kV, drafts, nullptr, 0, kV);
    ++count[static_cast<size_t>(r.accepted == 1 ? draft : r.next)];
  }
  EXPECT_LT(chi2(count, softmax(reference(p, kContext, kGenerated, kRow)), n), kChi2Limit);
  EXPECT_GT(chi2(count, softmax(kRow), n), kChi2Limit);
}

}  // namespace
}  // namespace rw
