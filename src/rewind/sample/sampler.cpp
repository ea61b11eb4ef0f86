#include "rewind/sample/sampler.h"

#include <algorithm>
#include <cmath>
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

}  // namespace

namespace {
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
}  // namespace

// The first index whose value is the largest, as the plain scan `if (v[i] > best) take i` from
// -inf gives it (NaN never wins; a row of -inf / NaN yields 0), a block at a time: a block is
// scanned element by element only when its largest value beats the best so far, which is
// exactly when the plain scan would take one of its elements. A 248k-entry vocabulary took
// about 200 us per decode step with the plain scan, several times the vector pass.
int32_t argmax(const float* v, int32_t n) {
  REWIND_CHECK(n > 0);
  constexpr int32_t kBlock = 1024;
  int32_t best = 0;
  float best_v = -std::numeric_limits<float>::infinity();
  for (int32_t b = 0; b < n; b += kBlock) {
    const int32_t e = std::min(n, b + kBlock);
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
  double z_max = -kInf;
  for (int32_t i = 0; i < n; ++i) {
    const double z = static_cast<double>(logits[i]) * inv_t;
    if (z > z_max) z_max = z;
  }
  if (z_max == -kInf) {  // all -inf or NaN: the argmax convention
    c.push_back({0, 0.0, 1.0});
    *total = 1.0;
    return;
  }
  for (int32_t i = 0; i < n; ++i) {
    const double z = static_cast<double>(logits[i]) * inv_t;
    if (!(z > -kInf)) continue;  // -inf and NaN
    // +inf logits share the mass equally; everything else then gets none.
    const double w = z_max == kInf ? (z == kInf ? 1.0 : 0.0) : std::exp(z - z_max);
    if (w > 0.0) c.push_back({i, z, w});
  }
  bool by_id = true;  // c is sorted by id

  const auto k = static_cast<size_t>(std::max(p_.top_k, 0));
  if (k > 0 && k < c.size()) {
    std::nth_element(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(k - 1), c.end(),
                     [](const Candidate& a, const Candidate& b) { return better(a, b); });
    c.resize(k);
    by_id = false;
  }

  if (p_.top_p < 1.0f && c.size() > 1) {
    double sum = 0.0;
    for (const Candidate& x : c) sum += x.w;
    const double target = static_cast<double>(p_.top_p) * sum;
    // Sort a prefix first; the nucleus is usually small. Fall back to sorting everything.
    size_t sorted = std::min<size_t>(c.size(), 256);
    for (;;) {
      std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(sorted), c.end(),
                        [](const Candidate& a, const Candidate& b) { return better(a, b); });
      double cum = 0.0;
      size_t keep = 0;
      while (keep < sorted) {
        cum += c[keep++].w;
        if (cum >= target) break;
      }
      if (cum >= target || sorted == c.size()) {
        c.resize(std::max<size_t>(keep, 1));
        break;
      }
      sorted = std::min(c.size(), sorted * 8);
    }
    by_id = false;
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
  double total = 0.0;
  int32_t last = 0;
  for (int32_t i = 0; i < n; ++i)
    if (w[i] > 0.0f) {
      total += w[i];
      last = i;
    }
  const double u = next_uniform() * total;
  double cum = 0.0;
  for (int32_t i = 0; i < n; ++i) {
    if (!(w[i] > 0.0f)) continue;
    cum += w[i];
    if (u < cum) return i;
  }
  return last;
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
