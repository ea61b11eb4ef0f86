#include "rewind/sample/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>

#include "rewind/base/check.h"
#include "rewind/base/clones.h"

namespace rw {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

// Higher z first, then lower id: the order top-k and top-p keep from.
bool better(const auto& a, const auto& b) {
  return a.z != b.z ? a.z > b.z : a.id < b.id;
}

// A draw from non-negative weights w[0..n), in index order: the sum of the positive ones (and
// the last positive index in *last), then the index whose running sum first passes u (the last
// positive one if rounding leaves u past the total).
template <typename T>
double positive_total(const T* w, int32_t n, int32_t* last) {
  double total = 0.0;
  *last = 0;
  for (int32_t i = 0; i < n; ++i)
    if (w[i] > T{0}) {
      total += w[i];
      *last = i;
    }
  return total;
}
template <typename T>
int32_t pick(const T* w, int32_t n, double u, int32_t last) {
  double cum = 0.0;
  for (int32_t i = 0; i < n; ++i) {
    if (!(w[i] > T{0})) continue;
    cum += w[i];
    if (u < cum) return i;
  }
  return last;
}

constexpr int32_t kArgmaxBlock = 1024;
// The largest of v[0..n) by `x > m ? x : m` per lane from -inf (NaN never taken), then across the
// lanes: per lane the select is maxps, so the loop vectorises.
REWIND_CLONES
float block_max(const float* v, int32_t n) {
  constexpr int kL = 16;
  float lane[kL];
  for (int l = 0; l < kL; ++l) lane[l] = -std::numeric_limits<float>::infinity();
  int32_t i = 0;
  for (; i + kL <= n; i += kL)
    for (int l = 0; l < kL; ++l) lane[l] = v[i + l] > lane[l] ? v[i + l] : lane[l];
  float m = -std::numeric_limits<float>::infinity();
  for (; i < n; ++i) m = v[i] > m ? v[i] : m;
  for (int l = 0; l < kL; ++l) m = lane[l] > m ? lane[l] : m;
  return m;
}
// e^x for x <= 0 by a fixed algorithm that loops vectorise (no libm call, the same IEEE
// operations in every clone): x = k ln2 + r with k the nearest integer to x / ln2 (by the
// 1.5 * 2^52 shifter, whose low mantissa bits then hold k), r by two fmas against ln2 split in
// a high part exact in k * ln2_hi and a low part, e^r by its Taylor series to degree 13 (|r| <=
// ln2 / 2: truncation under 1e-17, relative), times 2^k built in the exponent bits. Within a
// few ulps of std::exp (Sampler.ExpWeightMatchesStdExp); 0 below -708 (where 2^k would leave
// the normal range: weights under 1e-307 of the largest, which no draw can pick).
inline double exp_neg(double x) {
  constexpr double kLog2e = 1.4426950408889634, kShift = 0x1.8p52;
  constexpr double kLn2Hi = 0x1.62e42fefa3800p-1, kLn2Lo = 0x1.ef35793c76730p-45;
  const double t = std::fma(x, kLog2e, kShift);
  const double kd = t - kShift;
  const double r = std::fma(-kd, kLn2Lo, std::fma(-kd, kLn2Hi, x));
  // 1/13!, 1/12!, ..., 1/2!, 1/1!, 1/0!: Horner from the top.
  constexpr double kCoef[] = {1.0 / 6227020800.0,
                              1.0 / 479001600.0,
                              1.0 / 39916800.0,
                              1.0 / 3628800.0,
                              1.0 / 362880.0,
                              1.0 / 40320.0,
                              1.0 / 5040.0,
                              1.0 / 720.0,
                              1.0 / 120.0,
                              1.0 / 24.0,
                              1.0 / 6.0,
                              0.5,
                              1.0,
                              1.0};
  double p = kCoef[0];
#pragma GCC unroll 16  // unrolled, so that the callers' loops vectorise
  for (size_t i = 1; i < std::size(kCoef); ++i) p = std::fma(p, r, kCoef[i]);
  const uint64_t k = std::bit_cast<uint64_t>(t) - std::bit_cast<uint64_t>(kShift);
  const double scale = std::bit_cast<double>((k + 1023) << 52);
  return x >= -708.0 ? p * scale : 0.0;
}

// w[j] = e^(z_j - z_max) with z_j = logits[j] / T (inv_t = 1/T), or 0 where the logit is -inf
// or NaN, for j < n; z_max finite and the largest z (so z_j - z_max <= 0).
REWIND_CLONES
void exp_weights(const float* logits, int32_t n, double inv_t, double z_max, double* w) {
  for (int32_t j = 0; j < n; ++j) {
    const double z = static_cast<double>(logits[j]) * inv_t;
    w[j] = z > -std::numeric_limits<double>::infinity() ? exp_neg(z - z_max) : 0.0;
  }
}

// The largest logit (NaN never counts; -inf when there is none).
float max_logit(const float* logits, int32_t n) {
  float l_max = -std::numeric_limits<float>::infinity();
  for (int32_t b = 0; b < n; b += kArgmaxBlock) {
    const float m = block_max(logits + b, std::min(kArgmaxBlock, n - b));
    l_max = m > l_max ? m : l_max;
  }
  return l_max;
}
}  // namespace

double sampler_exp_weight(double x) {
  return exp_neg(x);
}

// The first index whose value is the largest, as the plain scan `if (v[i] > best) take i` from
// -inf gives it (NaN never wins; a row of -inf / NaN yields 0), a block at a time: a block is
// scanned element by element only when its largest value beats the best so far, which is
// exactly when the plain scan would take one of its elements. A 248k-entry vocabulary took
// about 200 us per decode step with the plain scan, several times the vector pass.
int32_t argmax(const float* v, int32_t n) {
  REWIND_CHECK(n > 0);
  int32_t best = 0;
  float best_v = -std::numeric_limits<float>::infinity();
  for (int32_t b = 0; b < n; b += kArgmaxBlock) {
    const int32_t e = std::min(n, b + kArgmaxBlock);
    if (!(block_max(v + b, e - b) > best_v)) continue;
    for (int32_t i = b; i < e; ++i) {
      if (v[i] > best_v) {  // false for NaN
        best_v = v[i];
        best = i;
      }
    }
  }
  return best;
}

Sampler::Sampler(const SamplingParams& p) : p_(p) {
  uint64_t x = p.seed;
  for (uint64_t& s : s_) s = splitmix64(x);
}

uint64_t Sampler::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Sampler::next_uniform() {
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

void Sampler::filter(const float* logits, int32_t n, std::vector<Candidate>& c,
                     double* total) const {
  REWIND_CHECK(n > 0);
  c.clear();
  if (p_.temperature <= 0.0f) {
    c.push_back({argmax(logits, n), 0.0, 1.0});
    *total = 1.0;
    return;
  }
  const double inv_t = 1.0 / static_cast<double>(p_.temperature);
  // z = logit / T is monotone in the logit, so z_max is the largest logit's z (NaN never counts).
  const double z_max = static_cast<double>(max_logit(logits, n)) * inv_t;
  if (z_max == -kInf) {  // all -inf or NaN: the argmax convention
    c.push_back({0, 0.0, 1.0});
    *total = 1.0;
    return;
  }
  // +inf logits share the mass equally; everything else then gets none.
  auto weight = [&](double z) {
    return z_max == kInf ? (z == kInf ? 1.0 : 0.0) : exp_neg(z - z_max);
  };
  bool by_id = true;  // c is sorted by id
  const auto by_rank = [](const Candidate& a, const Candidate& b) { return better(a, b); };

  const auto k = static_cast<size_t>(std::max(p_.top_k, 0));
  if (k > 0 && k < static_cast<size_t>(n)) {
    // Top k by (z desc, id asc) in one pass, keeping the k best seen in a heap whose front is
    // the worst of them: a block whose largest logit does not beat that front holds nothing
    // better (its ties come later, so lose on id), and is skipped at the vector maximum's cost.
    // Weights only for the k; those that underflow to 0 are dropped after the selection, which
    // keeps the same set as dropping them first (the weight falls with z).
    std::vector<std::pair<float, int32_t>> heap;
    heap.reserve(k);
    auto better_l = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    };
    for (int32_t b = 0; b < n; b += kArgmaxBlock) {
      const int32_t e = std::min(n, b + kArgmaxBlock);
      if (heap.size() == k && !(block_max(logits + b, e - b) > heap.front().first)) continue;
      for (int32_t i = b; i < e; ++i) {
        const float l = logits[i];
        if (!(l > -std::numeric_limits<float>::infinity())) continue;  // -inf and NaN
        if (heap.size() < k) {
          heap.emplace_back(l, i);
          std::push_heap(heap.begin(), heap.end(), better_l);
        } else if (l > heap.front().first) {
          std::pop_heap(heap.begin(), heap.end(), better_l);
          heap.back() = {l, i};
          std::push_heap(heap.begin(), heap.end(), better_l);
        }
      }
    }
    for (const auto& [l, i] : heap) {
      const double z = static_cast<double>(l) * inv_t;
      const double w = weight(z);
      if (w > 0.0) c.push_back({i, z, w});
    }
    by_id = false;
  } else {
    c.reserve(static_cast<size_t>(n));
    if (z_max == kInf) {
      for (int32_t i = 0; i < n; ++i)
        if (logits[i] == std::numeric_limits<float>::infinity()) c.push_back({i, kInf, 1.0});
    } else {
      // The weights a block at a time in one vector pass, then the candidates from them.
      double w[kArgmaxBlock];
      for (int32_t b = 0; b < n; b += kArgmaxBlock) {
        const int32_t e = std::min(n, b + kArgmaxBlock);
        exp_weights(logits + b, e - b, inv_t, z_max, w);
        for (int32_t i = b; i < e; ++i)
          if (w[i - b] > 0.0) c.push_back({i, static_cast<double>(logits[i]) * inv_t, w[i - b]});
      }
    }
  }

  if (p_.top_p < 1.0f && c.size() > 1) {
    double sum = 0.0;
    for (const Candidate& x : c) sum += x.w;
    const double target = static_cast<double>(p_.top_p) * sum;
    if (c.size() <= 1024) {
      // Few candidates (after top-k): sort them all, keep the shortest prefix reaching target.
      std::sort(c.begin(), c.end(), by_rank);
      double cum = 0.0;
      size_t keep = 0;
      while (keep < c.size()) {
        cum += c[keep++].w;
        if (cum >= target) break;
      }
      c.resize(std::max<size_t>(keep, 1));
      by_id = false;
    } else {
      // Many: bucket the candidates by z_max - z (16 buckets per unit, so by weight bands of
      // e^(-1/16)); every bucket before the one where the running mass reaches target is kept
      // whole, and only that bucket is sorted, to find how much of it the prefix needs. The
      // kept set is the sorted order's prefix, as with a full sort. (A growing partial sort
      // took 10 ms a token on a 248k vocabulary at top_p 0.9.)
      constexpr int kPerUnit = 16, kBuckets = 64 * kPerUnit;  // z_max - z >= 64 share the last
      auto bucket = [&](const Candidate& x) {
        const double d = (z_max - x.z) * kPerUnit;  // >= 0; +inf z_max: only z = +inf remain
        return d < kBuckets - 1 ? static_cast<int>(d) : kBuckets - 1;
      };
      std::vector<double> mass(kBuckets, 0.0);
      for (const Candidate& x : c) mass[static_cast<size_t>(bucket(x))] += x.w;
      double cum = 0.0;
      int cut = 0;
      while (cut < kBuckets - 1 && cum + mass[static_cast<size_t>(cut)] < target)
        cum += mass[static_cast<size_t>(cut++)];
      std::vector<Candidate> edge;
      for (const Candidate& x : c)
        if (bucket(x) == cut) edge.push_back(x);
      std::sort(edge.begin(), edge.end(), by_rank);
      size_t take = 0;  // how many of the edge bucket the prefix needs (all if never reached)
      while (take < edge.size()) {
        cum += edge[take++].w;
        if (cum >= target) break;
      }
      // The edge bucket's last kept candidate, in sorted order: a candidate of that bucket stays
      // iff it is not worse.
      const Candidate* last = take > 0 ? &edge[take - 1] : nullptr;
      size_t kept = 0;
      for (const Candidate& x : c) {
        const int bx = bucket(x);
        if (bx < cut || (bx == cut && last && !better(*last, x))) c[kept++] = x;
      }
      c.resize(std::max<size_t>(kept, 1));  // by id still: filtered in place, in order
    }
  }

  if (p_.min_p > 0.0f && c.size() > 1) {
    double w_max = 0.0;
    for (const Candidate& x : c) w_max = std::max(w_max, x.w);
    const double cut = static_cast<double>(p_.min_p) * w_max;
    c.erase(std::remove_if(c.begin(), c.end(), [&](const Candidate& x) { return x.w < cut; }),
            c.end());
  }

  if (!by_id)
    std::sort(c.begin(), c.end(),
              [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  double sum = 0.0;
  for (const Candidate& x : c) sum += x.w;
  *total = sum;
}

int32_t Sampler::sample(const float* logits, int32_t n_vocab) {
  if (p_.temperature <= 0.0f) return argmax(logits, n_vocab);
  if (p_.top_k <= 0 && p_.top_p >= 1.0f) {
    // Temperature (and min-p) alone: every token with a weight is a candidate, in id order, so
    // the draw runs over the weight array itself, with the candidate list's weights, sums and
    // order (filter's), without building the list.
    REWIND_CHECK(n_vocab > 0);
    const double inv_t = 1.0 / static_cast<double>(p_.temperature);
    const double z_max = static_cast<double>(max_logit(logits, n_vocab)) * inv_t;
    if (z_max == -kInf) {
      next_uniform();  // one draw per call, as on filter's path
      return 0;
    }
    if (z_max != kInf) {
      weights_.resize(static_cast<size_t>(n_vocab));
      double* w = weights_.data();
      exp_weights(logits, n_vocab, inv_t, z_max, w);
      // min-p against the largest weight, e^0 = 1 (filter skips it with one candidate, which
      // then is the largest and passes the cut anyway).
      if (p_.min_p > 0.0f) {
        const double cut = static_cast<double>(p_.min_p);
        for (int32_t i = 0; i < n_vocab; ++i)
          if (w[i] < cut) w[i] = 0.0;
      }
      int32_t last;
      const double total = positive_total(w, n_vocab, &last);
      return pick(w, n_vocab, next_uniform() * total, last);
    }
  }
  double total = 0.0;
  filter(logits, n_vocab, scratch_, &total);
  const double u = next_uniform() * total;
  double cum = 0.0;
  for (const Candidate& x : scratch_) {
    cum += x.w;
    if (u < cum) return x.id;
  }
  return scratch_.back().id;  // u within rounding of the total
}

int32_t Sampler::draw(const float* w, int32_t n) {
  int32_t last;
  const double total = positive_total(w, n, &last);
  return pick(w, n, next_uniform() * total, last);
}

std::vector<float> Sampler::probabilities(const float* logits, int32_t n_vocab) const {
  std::vector<Candidate> c;
  double total = 0.0;
  filter(logits, n_vocab, c, &total);
  std::vector<float> p(static_cast<size_t>(n_vocab), 0.0f);
  for (const Candidate& x : c) p[x.id] = static_cast<float>(x.w / total);
  return p;
}

}  // namespace rw
