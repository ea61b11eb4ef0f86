// Speculative acceptance (sample/speculative_accept.h): greedy acceptance is argmax matching;
// with sampling, the emitted tokens follow the target distribution whatever the drafts were
// (a chi-square test on a small vocabulary, for deterministic drafts and for sampled drafts
// with their own distribution q), and a broken acceptance rule fails the same test.
#include "rewind/sample/speculative_accept.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace rw {
namespace {

constexpr int32_t kV = 6;

std::vector<double> softmax(const std::vector<float>& l) {
  double mx = -1e30, s = 0;
  for (float x : l) mx = std::max(mx, static_cast<double>(x));
  std::vector<double> p(l.size());
  for (size_t i = 0; i < l.size(); ++i) s += (p[i] = std::exp(l[i] - mx));
  for (auto& x : p) x /= s;
  return p;
}

// Pearson chi-square statistic of observed counts against expected probabilities.
double chi2(const std::vector<int64_t>& obs, const std::vector<double>& p, int64_t n) {
  double c = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * static_cast<double>(n);
    if (e > 0) c += (obs[i] - e) * (obs[i] - e) / e;
  }
  return c;
}

TEST(SpeculativeAccept, GreedyAcceptsWhileArgmaxMatches) {
  Sampler s(SamplingParams{});
  // Rows: argmax 2, 4, 1.
  std::vector<float> lg = {0, 0, 5, 0, 0, 0, /**/ 0, 0, 0, 0, 5, 0, /**/ 0, 5, 0, 0, 0, 0};
  std::vector<int32_t> d = {2, 4};
  auto r = speculative_accept(s, lg.data(), kV, d, nullptr, 0, kV);
  EXPECT_EQ(r.accepted, 2);
  EXPECT_EQ(r.next, 1);
  d = {2, 3};
  r = speculative_accept(s, lg.data(), kV, d, nullptr, 0, kV);
  EXPECT_EQ(r.accepted, 1);
  EXPECT_EQ(r.next, 4);
  d = {0, 4};
  r = speculative_accept(s, lg.data(), kV, d, nullptr, 0, kV);
  EXPECT_EQ(r.accepted, 0);
  EXPECT_EQ(r.next, 2);
}

// Two positions with fixed target rows: the first emitted token must follow p0, and the second
// (emitted only when the first draft was accepted, or as the bonus) must follow p1.
struct Counts {
  std::vector<int64_t> first = std::vector<int64_t>(kV, 0), second = std::vector<int64_t>(kV, 0);
  int64_t n_second = 0;
};

Counts run_trials(int64_t n, bool sampled_draft, bool broken) {
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 99;
  Sampler target(sp);
  SamplingParams dp = sp;
  dp.seed = 1234;
  Sampler draft(dp);
  const std::vector<float> l0 = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -1.0f};
  const std::vector<float> l1 = {-1.0f, 1.5f, 0.3f, 0.3f, -2.0f, 0.8f};
  const std::vector<float> lq = {0.0f, 1.0f, 1.0f, 0.5f, -1.0f, 0.0f};  // the draft's own
  std::vector<float> lg(l0);
  lg.insert(lg.end(), l1.begin(), l1.end());
  lg.insert(lg.end(), l1.begin(), l1.end());  // row 2 (bonus after two accepts): unused here
  std::vector<float> q = draft.probabilities(lq.data(), kV);
  q.insert(q.end(), q.begin(), q.end());
  Counts c;
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int32_t> d(1);
    if (sampled_draft) {
      d[0] = draft.sample(lq.data(), kV);
    } else {
      d[0] = static_cast<int32_t>(t % 3);  // deterministic drafts, fixed pattern
    }
    AcceptResult r;
    if (broken) {  // a wrong rule: accept whenever p(d) > 0.1, no residual correction
      const auto p = target.probabilities(lg.data(), kV);
      r.accepted = p[d[0]] > 0.1f ? 1 : 0;
      r.next = target.sample(lg.data() + r.accepted * kV, kV);
    } else {
      r = speculative_accept(target, lg.data(), kV, d, sampled_draft ? q.data() : nullptr, kV, kV);
    }
    const int32_t first = r.accepted >= 1 ? d[0] : r.next;
    ++c.first[first];
    if (r.accepted == 1) {
      ++c.second[r.next];
      ++c.n_second;
    }
  }
  return c;
}

// 5 degrees of freedom: P(chi2 > 25) is about 1.4e-4. Deterministic seeds: no flakiness.
constexpr double kChi2Limit = 25.0;

// Chi-square of the first and second emitted tokens against the target rows.
void expect_target_distribution(bool sampled_draft) {
  const int64_t n = 200000;
  Counts c = run_trials(n, sampled_draft, false);
  const auto p0 = softmax({1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -1.0f});
  const auto p1 = softmax({-1.0f, 1.5f, 0.3f, 0.3f, -2.0f, 0.8f});
  EXPECT_LT(chi2(c.first, p0, n), kChi2Limit);
  ASSERT_GT(c.n_second, 10000);
  EXPECT_LT(chi2(c.second, p1, c.n_second), kChi2Limit);
}

TEST(SpeculativeAccept, SamplingKeepsTheTargetDistributionDeterministicDrafts) {
  expect_target_distribution(false);
}

TEST(SpeculativeAccept, SamplingKeepsTheTargetDistributionSampledDrafts) {
  expect_target_distribution(true);
}

TEST(SpeculativeAccept, TheTestRejectsABrokenRule) {
  const int64_t n = 200000;
  Counts c = run_trials(n, false, true);
  const auto p0 = softmax({1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -1.0f});
  EXPECT_GT(chi2(c.first, p0, n), 10 * kChi2Limit);
}

TEST(SpeculativeAccept, PlainAndSpeculativeSamplersAgree) {
  // The plain sampler's empirical distribution and the speculative one's, side by side, on
  // the same row (two-sample chi-square on counts).
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_k = 5;
  sp.seed = 3;
  Sampler plain(sp), spec(sp);
  const std::vector<float> l = {0.5f, 1.5f, -0.2f, 1.0f, 0.1f, 3.0f};
  std::vector<float> lg(l);
  lg.insert(lg.end(), l.begin(), l.end());
  const int64_t n = 100000;
  std::vector<int64_t> a(kV, 0), b(kV, 0);
  for (int64_t t = 0; t < n; ++t) {
    ++a[plain.sample(l.data(), kV)];
    std::vector<int32_t> d = {static_cast<int32_t>(t % kV)};
    auto r = speculative_accept(spec, lg.data(), kV, d, nullptr, kV, kV);
    ++b[r.accepted ? d[0] : r.next];
  }
  double c = 0;
  for (int32_t i = 0; i < kV; ++i)
    if (a[i] + b[i] > 0) c += std::pow(a[i] - b[i], 2) / static_cast<double>(a[i] + b[i]);
  EXPECT_LT(c, kChi2Limit);
}

}  // namespace
}  // namespace rw
