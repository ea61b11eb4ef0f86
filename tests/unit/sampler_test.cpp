// Sampler tests: greedy and its tie rule, NaN/-inf handling, determinism per seed, the filters
// (top-k, top-p, min-p) against direct computations, and a fixed-seed chi-square check that
// sampled frequencies follow softmax(logits / T).
#include "rewind/sample/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

namespace rw {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<double> softmax(const std::vector<float>& logits, double t) {
  double m = -1e300;
  for (float x : logits) m = std::max(m, x / t);
  std::vector<double> p;
  double s = 0;
  for (float x : logits) s += std::exp(x / t - m);
  for (float x : logits) p.push_back(std::exp(x / t - m) / s);
  return p;
}

// A fixed pseudo-random row (not the sampler's RNG).
std::vector<float> row(int n, uint32_t seed, float scale) {
  std::vector<float> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = scale * static_cast<float>(x >> 8) / static_cast<float>(1 << 24);
  }
  return v;
}

SamplingParams params(float t, int32_t k = 0, float p = 1.0f, float min_p = 0.0f,
                      uint64_t seed = 0) {
  SamplingParams s;
  s.temperature = t;
  s.top_k = k;
  s.top_p = p;
  s.min_p = min_p;
  s.seed = seed;
  return s;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  Sampler s(params(0.0f));
  const std::vector<float> a = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f};
  EXPECT_EQ(s.sample(a.data(), 5), 1);
  EXPECT_EQ(argmax(a.data(), 5), 1);
  const std::vector<float> b = {kNaN, 1.0f, kNaN, 0.5f};
  EXPECT_EQ(argmax(b.data(), 4), 1);
  const std::vector<float> all_inf = {-kInf, -kInf, -kInf};
  EXPECT_EQ(argmax(all_inf.data(), 3), 0);
  const std::vector<float> all_nan = {kNaN, kNaN};
  EXPECT_EQ(argmax(all_nan.data(), 2), 0);
  Sampler neg(params(-1.0f));  // temperature <= 0 is greedy too
  EXPECT_EQ(neg.sample(a.data(), 5), 1);
}

// argmax scans in blocks and looks inside a block only when its vector maximum beats the best so
// far: it must pick exactly what the plain first-strictly-greater scan picks, at every size
// around the block length and with ties, signed zeros, NaN and -inf anywhere.
TEST(Sampler, ArgmaxEqualsThePlainScan) {
  auto plain = [](const std::vector<float>& v) {
    int32_t best = 0;
    float bv = -kInf;
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] > bv) {
        bv = v[i];
        best = static_cast<int32_t>(i);
      }
    return best;
  };
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> kind(0, 9), small(-3, 3);
  for (int n : {1, 2, 15, 16, 17, 1023, 1024, 1025, 2047, 2048, 2049, 5000, 248320}) {
    for (int rep = 0; rep < 6; ++rep) {
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) {
        const int k = kind(rng);
        // Few distinct values, so the maximum repeats across blocks (ties: the lowest id).
        x = k == 0   ? kNaN
            : k == 1 ? -kInf
            : k == 2 ? -0.0f
            : k == 3 ? 0.0f
                     : static_cast<float>(small(rng));
        if (rep == 1) x = x > 0 ? -x : x;  // nothing above zero: the signed zeros decide
        if (rep == 2) x = std::isnan(x) ? kNaN : -kInf;  // nothing finite: token 0
      }
      if (rep == 3) v.back() = 100.0f;                              // the maximum in the last block
      if (rep == 4 && n > 1) v[static_cast<size_t>(n / 2)] = kInf;  // +inf wins
      EXPECT_EQ(argmax(v.data(), n), plain(v)) << "n=" << n << " rep=" << rep;
    }
  }
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  const std::vector<float> logits(64, 0.0f);  // uniform
  Sampler a(params(1.0f, 0, 1.0f, 0.0f, 42)), b(params(1.0f, 0, 1.0f, 0.0f, 42));
  Sampler c(params(1.0f, 0, 1.0f, 0.0f, 43));
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 200; ++i) {
    ta.push_back(a.sample(logits.data(), 64));
    tb.push_back(b.sample(logits.data(), 64));
    tc.push_back(c.sample(logits.data(), 64));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(Sampler, FixedAlgorithmGivesFixedTokens) {
  // Pins the RNG (splitmix64 -> xoshiro256**) and the draw: these must never change. With equal
  // weights the token is floor(u * 1000); the values were checked against an independent
  // transcription of the reference splitmix64 / xoshiro256** code.
  const std::vector<float> logits(1000, 0.0f);
  Sampler s(params(1.0f, 0, 1.0f, 0.0f, 12345));
  std::vector<int32_t> got;
  for (int i = 0; i < 8; ++i) got.push_back(s.sample(logits.data(), 1000));
  EXPECT_EQ(got, (std::vector<int32_t>{743, 130, 963, 48, 555, 10, 159, 295}));
}

TEST(Sampler, TopK1AndTinyTopPAreGreedy) {
  for (uint32_t r = 0; r < 50; ++r) {
    std::vector<float> v = row(300, r, 4.0f);
    v[r % 300] = v[(r * 7 + 3) % 300] = 5.0f;  // a tie at the top
    const int32_t want = argmax(v.data(), 300);
    Sampler k1(params(1.0f, 1, 1.0f, 0.0f, r));
    Sampler p0(params(0.8f, 0, 1e-6f, 0.0f, r));
    EXPECT_EQ(k1.sample(v.data(), 300), want);
    EXPECT_EQ(p0.sample(v.data(), 300), want);
  }
}

TEST(Sampler, TopKKeepsTheKLargest) {
  const std::vector<float> v = {1.0f, 4.0f, 2.0f, 4.0f, 3.0f};
  Sampler s(params(1.0f, 3));
  const auto p = s.probabilities(v.data(), 5);
  // Kept: ids 1, 3 (tied 4.0) and 4 (3.0).
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_EQ(p[2], 0.0f);
  EXPECT_FLOAT_EQ(p[1], p[3]);
  EXPECT_NEAR(p[1] / p[4], std::exp(1.0), 1e-5);
  // A tie at the cut goes to the lower id.
  Sampler s2(params(1.0f, 1));
  const auto p2 = s2.probabilities(v.data(), 5);
  EXPECT_EQ(p2[1], 1.0f);
  EXPECT_EQ(p2[3], 0.0f);
}

TEST(Sampler, TopPKeepsTheSmallestSufficientPrefix) {
  // Probabilities 0.5, 0.3, 0.15, 0.05.
  const std::vector<float> v = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  Sampler s(params(1.0f, 0, 0.75f));
  auto p = s.probabilities(v.data(), 4);
  EXPECT_NEAR(p[1], 0.5 / 0.8, 1e-6);
  EXPECT_NEAR(p[3], 0.3 / 0.8, 1e-6);
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_EQ(p[2], 0.0f);
  Sampler s2(params(1.0f, 0, 0.9f));
  p = s2.probabilities(v.data(), 4);
  EXPECT_GT(p[0], 0.0f);
  EXPECT_EQ(p[2], 0.0f);

  // Large rows, a flat one (nucleus of thousands: the full-sort path) and a peaked one, against
  // a direct computation.
  for (float scale : {1.0f, 30.0f}) {
    const std::vector<float> big = row(5000, 7, scale);
    const float top_p = 0.9f;
    const auto ref = softmax(big, 1.0);
    std::vector<int32_t> order(5000);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](int32_t a, int32_t b) { return big[a] != big[b] ? big[a] > big[b] : a < b; });
    double cum = 0;
    size_t keep = 0;
    while (keep < order.size() && cum < top_p) cum += ref[order[keep++]];
    Sampler sp(params(1.0f, 0, top_p));
    const auto got = sp.probabilities(big.data(), 5000);
    size_t nonzero = 0;
    for (float x : got) nonzero += x > 0.0f ? 1 : 0;
    // Summation order differs from the sampler's: allow one token of slack at the boundary.
    EXPECT_NEAR(static_cast<double>(nonzero), static_cast<double>(keep), 1.0) << scale;
    for (size_t i = 0; i + 1 < keep; ++i) EXPECT_GT(got[order[i]], 0.0f);
  }
}

// The kept set of top-k (a one-pass heap selection that skips blocks at their vector maximum)
// and of top-p over many candidates (weight buckets, only the boundary bucket sorted) against a
// brute force: every valid token ranked by (logit desc, id asc), the first k kept; top-p keeps
// the shortest prefix of that ranking whose softmax mass reaches top_p. Rows of a few distinct
// values (ties inside and across blocks and buckets) with NaN and -inf sprinkled in.
TEST(Sampler, TopKAndTopPKeepTheBruteForceSets) {
  std::mt19937 rng(11);
  for (int n : {300, 2000, 5000, 40000}) {
    for (int rep = 0; rep < 4; ++rep) {
      std::vector<float> v(static_cast<size_t>(n));
      std::uniform_int_distribution<int> level(0, rep % 2 ? 40 : 400), odd(0, 49);
      for (float& x : v) {
        const int o = odd(rng);
        x = o == 0 ? kNaN : o == 1 ? -kInf : 0.05f * static_cast<float>(level(rng));
      }
      std::vector<int32_t> rank;
      for (int32_t i = 0; i < n; ++i)
        if (v[i] > -kInf) rank.push_back(i);
      std::stable_sort(rank.begin(), rank.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
      for (float t : {0.7f, 1.0f}) {
        for (int k : {1, 5, 20, 1000}) {
          Sampler sk(params(t, k));
          const auto p = sk.probabilities(v.data(), n);
          std::vector<char> want(static_cast<size_t>(n), 0);
          for (size_t j = 0; j < std::min<size_t>(k, rank.size()); ++j) want[rank[j]] = 1;
          for (int32_t i = 0; i < n; ++i)
            ASSERT_EQ(p[i] > 0.0f, want[i] != 0) << "n=" << n << " k=" << k << " id=" << i;
        }
        for (float top_p : {0.0f, 0.3f, 0.9f, 0.99f}) {
          Sampler sp(params(t, 0, top_p));
          const auto p = sp.probabilities(v.data(), n);
          std::vector<float> valid;  // the softmax over valid tokens, in rank order
          for (int32_t i : rank) valid.push_back(v[i]);
          const auto ref = softmax(valid, t);
          double cum = 0;
          size_t keep = 0;
          while (keep < ref.size() && cum < top_p) cum += ref[keep++];
          // Kept: exactly a prefix of the ranking (no holes), of the reference's length up to
          // one token at the boundary (the sums run in another order).
          size_t kept = 0;
          while (kept < rank.size() && p[rank[kept]] > 0.0f) ++kept;
          for (size_t j = kept; j < rank.size(); ++j) ASSERT_EQ(p[rank[j]], 0.0f) << j;
          EXPECT_NEAR(static_cast<double>(kept), static_cast<double>(keep), 1.0)
              << "n=" << n << " top_p=" << top_p;
          if (top_p == 0.0f) EXPECT_EQ(kept, 1u) << "n=" << n;  // the top token only
        }
      }
    }
  }
}

// The sampler's weights e^(z - z_max) come from its own vectorisable exp: within a few ulps of
// std::exp over the whole range it is used on, exact at 0, and 0 below -708.
TEST(Sampler, ExpWeightMatchesStdExp) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> wide(-708.0, 0.0), narrow(-1.0, 0.0);
  double worst = 0.0;
  for (int i = 0; i < 200000; ++i) {
    const double x = i % 2 ? wide(rng) : narrow(rng);
    const double want = std::exp(x), got = sampler_exp_weight(x);
    worst = std::max(worst, std::fabs(got - want) / want);
  }
  for (double x : {-0.0, -1e-300, -0.34657359, -0.34657360, -1.0, -100.5, -707.99}) {
    const double want = std::exp(x);
    worst = std::max(worst, std::fabs(sampler_exp_weight(x) - want) / want);
  }
  EXPECT_LT(worst, 1e-15);  // a few ulps (2.2e-16 each)
  EXPECT_EQ(sampler_exp_weight(0.0), 1.0);
  EXPECT_EQ(sampler_exp_weight(-708.5), 0.0);
  EXPECT_EQ(sampler_exp_weight(-1e308), 0.0);
}

// Temperature alone (and with min-p) draws straight from the weight array; with top_k = vocab
// size (no cut) the same request goes through the candidate list. Same seed, same tokens.
TEST(Sampler, TemperatureOnlyPathEqualsTheCandidateListPath) {
  for (uint32_t seed = 0; seed < 6; ++seed) {
    std::vector<float> v = row(3000, seed, 12.0f);
    v[seed * 7] = kNaN;
    v[seed * 11 + 1] = -kInf;
    for (float min_p : {0.0f, 0.05f, 0.5f}) {
      Sampler fast(params(0.8f, 0, 1.0f, min_p, seed));
      Sampler list(params(0.8f, 3000, 1.0f, min_p, seed));
      for (int i = 0; i < 300; ++i)
        ASSERT_EQ(fast.sample(v.data(), 3000), list.sample(v.data(), 3000))
            << "seed " << seed << " min_p " << min_p << " draw " << i;
    }
  }
  // Nothing finite: token 0 on both, each still taking its one draw.
  const std::vector<float> none = {kNaN, -kInf, kNaN};
  Sampler a(params(1.0f, 0, 1.0f, 0.0f, 9)), b(params(1.0f, 3, 1.0f, 0.0f, 9));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.sample(none.data(), 3), b.sample(none.data(), 3));
  EXPECT_EQ(a.uniform(), b.uniform());
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheMax) {
  const std::vector<float> v = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  Sampler s(params(1.0f, 0, 1.0f, 0.2f));  // keep p >= 0.1
  const auto p = s.probabilities(v.data(), 4);
  EXPECT_NEAR(p[0], 0.5 / 0.95, 1e-6);
  EXPECT_NEAR(p[1], 0.3 / 0.95, 1e-6);
  EXPECT_NEAR(p[2], 0.15 / 0.95, 1e-6);
  EXPECT_EQ(p[3], 0.0f);
  Sampler all(params(1.0f, 0, 1.0f, 1.0f));  // only the max survives
  const auto q = all.probabilities(v.data(), 4);
  EXPECT_EQ(q[0], 1.0f);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(all.sample(v.data(), 4), 0);
}

TEST(Sampler, ProbabilitiesSumToOne) {
  const std::vector<float> v = row(1000, 3, 8.0f);
  for (const SamplingParams& sp :
       {params(0.0f), params(1.0f), params(0.5f), params(2.0f, 40), params(1.0f, 0, 0.9f),
        params(1.0f, 0, 1.0f, 0.05f), params(0.7f, 100, 0.95f, 0.01f)}) {
    Sampler s(sp);
    const auto p = s.probabilities(v.data(), 1000);
    ASSERT_EQ(p.size(), 1000u);
    double sum = 0;
    for (float x : p) {
      EXPECT_GE(x, 0.0f);
      sum += x;
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
  Sampler greedy(params(0.0f));
  const auto g = greedy.probabilities(v.data(), 1000);
  EXPECT_EQ(g[argmax(v.data(), 1000)], 1.0f);
}

TEST(Sampler, NaNAndInfinities) {
  const std::vector<float> v = {kNaN, 0.0f, -kInf, 0.0f};
  Sampler s(params(1.0f, 0, 1.0f, 0.0f, 9));
  for (int i = 0; i < 200; ++i) {
    const int32_t t = s.sample(v.data(), 4);
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
  const auto p = s.probabilities(v.data(), 4);
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_EQ(p[2], 0.0f);
  EXPECT_FLOAT_EQ(p[1], 0.5f);
  // +inf logits share all the mass.
  const std::vector<float> w = {0.0f, kInf, 100.0f, kInf};
  const auto q = s.probabilities(w.data(), 4);
  EXPECT_EQ(q, (std::vector<float>{0.0f, 0.5f, 0.0f, 0.5f}));
  // A row with nothing finite: token 0, as argmax.
  const std::vector<float> dead = {-kInf, kNaN, -kInf};
  EXPECT_EQ(s.sample(dead.data(), 3), 0);
  EXPECT_EQ(s.probabilities(dead.data(), 3)[0], 1.0f);
}

TEST(Sampler, FrequenciesFollowSoftmaxChiSquare) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f};
  const float t = 0.7f;
  const auto p = softmax(logits, static_cast<double>(t));
  const int n = 20000;
  Sampler s(params(t, 0, 1.0f, 0.0f, 2024));
  std::vector<int> count(5, 0);
  for (int i = 0; i < n; ++i) ++count[s.sample(logits.data(), 5)];
  double chi2 = 0;
  for (int i = 0; i < 5; ++i) {
    const double e = n * p[i];
    chi2 += (count[i] - e) * (count[i] - e) / e;
  }
  // 4 degrees of freedom: P(chi2 > 25) is about 5e-5. The seed is fixed, so this is
  // deterministic; the bound only guards against a wrong distribution.
  EXPECT_LT(chi2, 25.0) << count[0] << " " << count[1] << " " << count[2] << " " << count[3] << " "
                        << count[4];
  // The filtered distribution is what probabilities() reports.
  const auto q = s.probabilities(logits.data(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(q[i], p[i], 1e-6);
}

}  // namespace
}  // namespace rw
