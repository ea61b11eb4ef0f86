#include "rewind/kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

// GCC builds each hot function for AVX-512, AVX2+FMA and baseline x86-64 and picks one at load
// time (ifunc). Every clone performs the same IEEE operations (explicit fma, no contraction, no
// reassociation), so the choice never changes a bit.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define REWIND_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define REWIND_CLONES
#endif

namespace rw {

namespace {
constexpr int kLanes = 16;

inline float reduce_lanes(const float* acc) {
  // Fixed tree: 16 -> 8 -> 4 -> 2 -> 1.
  float t8[8], t4[4];
  for (int i = 0; i < 8; ++i) t8[i] = acc[i] + acc[i + 8];
  for (int i = 0; i < 4; ++i) t4[i] = t8[i] + t8[i + 4];
  const float t2a = t4[0] + t4[2];
  const float t2b = t4[1] + t4[3];
  return t2a + t2b;
}

// e^x by a fixed algorithm (Cody-Waite reduction by ln2, degree-7 polynomial with explicit fma,
// exponent by bit arithmetic): the same IEEE operations in every clone and in scalar code, so
// results never depend on SIMD width; GCC vectorises it. Max relative error about 2e-7.
// Inputs are clamped to [-87, 88] (results stay normal; below, e^x would not matter next to 1).
inline __attribute__((always_inline)) float exp_fixed_inline(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = std::fma(x, 1.44269504088896341f, magic);
  const float n = t - magic;
  float r = std::fma(n, -0.693145751953125f, x);
  r = std::fma(n, -1.428606765330187e-6f, r);
  float p = 1.0f / 5040.0f;
  p = std::fma(p, r, 1.0f / 720.0f);
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  int32_t ti, ni;
  std::memcpy(&ti, &t, 4);
  const float m2 = magic;
  std::memcpy(&ni, &m2, 4);
  const int32_t e = (ti - ni + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, 4);
  return p * scale;
}
}  // namespace

// Inlined into each clone that uses it (the fixed order is the same everywhere).
inline __attribute__((always_inline)) float dot_fixed_inline(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = std::fma(a[i + l], b[i + l], acc[l]);
  for (int l = 0; i + l < n; ++l) acc[l] = std::fma(a[i + l], b[i + l], acc[l]);
  return reduce_lanes(acc);
}

// Sum in the same fixed 16-lane order.
inline __attribute__((always_inline)) float sum_fixed_inline(const float* a, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = acc[l] + a[i + l];
  for (int l = 0; i + l < n; ++l) acc[l] = acc[l] + a[i + l];
  return reduce_lanes(acc);
}

REWIND_CLONES
float dot_fixed(const float* a, const float* b, int64_t n) { return dot_fixed_inline(a, b, n); }

float sumsq_fixed(const float* a, int64_t n) { return dot_fixed(a, a, n); }

REWIND_CLONES
void rmsnorm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy, int64_t n_rows,
             int64_t n, float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    const float ms = sumsq_fixed(xr, n) / static_cast<float>(n);
    const float inv = 1.0f / std::sqrt(ms + eps);
    for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] * inv) * w[i];
  }
}

void rmsnorm_heads(float* x, int64_t n_heads, int64_t d, const float* w, float eps) {
  rmsnorm(x, d, w, x, d, n_heads, d, eps);
}

REWIND_CLONES
void l2norm_heads(float* x, int64_t n_heads, int64_t d, float eps, float scale) {
  for (int64_t h = 0; h < n_heads; ++h) {
    float* xh = x + h * d;
    const float inv = 1.0f / std::sqrt(sumsq_fixed(xh, d) + eps);
    for (int64_t i = 0; i < d; ++i) xh[i] = (xh[i] * inv) * scale;
  }
}

inline __attribute__((always_inline)) float silu_inline(float x) {
  return x / (1.0f + exp_fixed_inline(-x));
}
inline __attribute__((always_inline)) float sigmoid_inline(float x) {
  return 1.0f / (1.0f + exp_fixed_inline(-x));
}

REWIND_CLONES float exp_fixed(float x) { return exp_fixed_inline(x); }
REWIND_CLONES float silu(float x) { return silu_inline(x); }
REWIND_CLONES float sigmoid(float x) { return sigmoid_inline(x); }

REWIND_CLONES
void sigmoid_gate(float* a, const float* gate, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = a[i] * sigmoid_inline(gate[i]);
}
float softplus(float x) {
  // log(1 + e^x), stable for large |x| (torch uses a threshold of 20 with beta 1).
  if (x > 20.0f) return x;
  return std::log1p(std::exp(x));
}

REWIND_CLONES
void swiglu(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = (g[i] / (1.0f + exp_fixed_inline(-g[i]))) * u[i];
}

REWIND_CLONES
void gated_rmsnorm_heads(const float* o, const float* z, const float* w, float* y,
                         int64_t n_heads, int64_t d, float eps) {
  for (int64_t h = 0; h < n_heads; ++h) {
    const float* oh = o + h * d;
    const float* zh = z + h * d;
    float* yh = y + h * d;
    const float ms = dot_fixed_inline(oh, oh, d) / static_cast<float>(d);
    const float inv = 1.0f / std::sqrt(ms + eps);
    for (int64_t i = 0; i < d; ++i) yh[i] = (w[i] * (oh[i] * inv)) * silu_inline(zh[i]);
  }
}

void rope_heads(float* x, int64_t n_heads, int64_t d, int64_t rope_dim, const float* inv_freq,
                int64_t pos) {
  const int64_t half = rope_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float ang = static_cast<float>(pos) * inv_freq[i];
    const float c = std::cos(ang);
    const float s = std::sin(ang);
    for (int64_t h = 0; h < n_heads; ++h) {
      float* xh = x + h * d;
      const float a = xh[i];
      const float b = xh[i + half];
      xh[i] = a * c - b * s;
      xh[i + half] = b * c + a * s;
    }
  }
}

REWIND_CLONES
void conv_silu(float* window, const float* in, int64_t ld_in, const float* w, float* out,
               int64_t ld_out, int64_t T, int64_t C, int64_t K, int64_t c0, int64_t c1) {
  const int64_t W = K - 1;
  // Row j of [window ; in] (j < W + T), for the channels handled.
  auto seq = [&](int64_t j) { return j < W ? window + j * C : in + (j - W) * ld_in; };
  // Tokens outer, channels inner (contiguous, vectorisable); per element the taps run j = 0..K-1.
  for (int64_t t = 0; t < T; ++t) {
    float* o = out + t * ld_out;
    for (int64_t c = c0; c < c1; ++c) o[c] = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
      const float* x = seq(t + j);
      const float* wj = w + j * C;
      for (int64_t c = c0; c < c1; ++c) o[c] = std::fma(wj[c], x[c], o[c]);
    }
    for (int64_t c = c0; c < c1; ++c) o[c] = silu_inline(o[c]);
  }
  // New window: rows T .. T+W-1 of [window ; in]. Row j reads row T+j > j, not yet overwritten.
  for (int64_t j = 0; j < W; ++j) {
    const float* x = seq(T + j);
    float* dst = window + j * C;
    if (x != dst)
      for (int64_t c = c0; c < c1; ++c) dst[c] = x[c];
  }
}

REWIND_CLONES
// __restrict: the state, inputs and output never overlap, which lets the compiler vectorise the
// j loops (each j is its own chain, i stays in order, so the bits are those of the scalar loops).
void gdn_step(float* __restrict S, const float* __restrict q, const float* __restrict k,
              const float* __restrict v, float alpha, float beta, float* __restrict o, int64_t dk,
              int64_t dv) {
  // Decay, then read memory m[j] = sum_i S[i,j] k[i] (i in order).
  float m[512];
  float* mem = dv <= 512 ? m : new float[dv];
  for (int64_t j = 0; j < dv; ++j) mem[j] = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    float* Si = S + i * dv;
    const float ki = k[i];
    for (int64_t j = 0; j < dv; ++j) {
      Si[j] = Si[j] * alpha;
      mem[j] = std::fma(Si[j], ki, mem[j]);
    }
  }
  for (int64_t j = 0; j < dv; ++j) mem[j] = beta * (v[j] - mem[j]);  // u
  // Rank-1 update and output o[j] = sum_i S[i,j] q[i] with the updated state.
  for (int64_t j = 0; j < dv; ++j) o[j] = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    float* Si = S + i * dv;
    const float ki = k[i];
    const float qi = q[i];
    for (int64_t j = 0; j < dv; ++j) {
      Si[j] = std::fma(ki, mem[j], Si[j]);
      o[j] = std::fma(Si[j], qi, o[j]);
    }
  }
  if (mem != m) delete[] mem;
}

namespace {

// Scores of keys [b0, b0 + nb) of one block into s: s[j] = fma chain over i of q[i] * K(i, j).
// kChunk keys at a time in registers when the block allows reading whole chunks.
template <int kChunk>
inline __attribute__((always_inline)) void scores_block(const float* q, const float* kb,
                                                        int64_t block, int64_t nb, int64_t d,
                                                        float* s) {
  int64_t j0 = 0;
  if (block % kChunk == 0) {
    // Whole chunks (lanes past nb read valid, finite page memory and are discarded).
    for (; j0 < nb; j0 += kChunk) {
      float acc[kChunk] = {};
      for (int64_t i = 0; i < d; ++i) {
        const float qi = q[i];
        const float* ki = kb + i * block + j0;
        for (int jj = 0; jj < kChunk; ++jj) acc[jj] = std::fma(qi, ki[jj], acc[jj]);
      }
      const int64_t m = std::min<int64_t>(kChunk, nb - j0);
      for (int64_t jj = 0; jj < m; ++jj) s[j0 + jj] = acc[jj];
    }
    return;
  }
  for (int64_t j = 0; j < nb; ++j) {
    float acc = 0.0f;
    for (int64_t i = 0; i < d; ++i) acc = std::fma(q[i], kb[i * block + j], acc);
    s[j] = acc;
  }
}

// o += sum over the block's keys in order of (p_j * inv) * V_j, accumulators in registers.
template <int D>
inline __attribute__((always_inline)) void weighted_values(const float* vb, int64_t ld, int64_t nb,
                                                           const float* p, float inv, float* o) {
  float acc[D];
  for (int i = 0; i < D; ++i) acc[i] = o[i];
  for (int64_t j = 0; j < nb; ++j) {
    const float* vj = vb + j * ld;
    const float pj = p[j] * inv;
    for (int i = 0; i < D; ++i) acc[i] = std::fma(pj, vj[i], acc[i]);
  }
  for (int i = 0; i < D; ++i) o[i] = acc[i];
}

}  // namespace

REWIND_CLONES
void attention_head(const float* q, const float* const* k_blocks, const float* const* v_blocks,
                    int64_t block, int64_t ld, int64_t n_keys, int64_t d, float scale,
                    float* out, float* scratch) {
  attention_rows(q, d, 1, &n_keys, k_blocks, v_blocks, block, ld, d, scale, out, d, scratch);
}

REWIND_CLONES
void attention_rows(const float* q, int64_t ldq, int64_t m, const int64_t* n_keys,
                    const float* const* k_blocks, const float* const* v_blocks, int64_t block,
                    int64_t ld, int64_t d, float scale, float* out, int64_t ldo, float* scratch) {
  const int64_t n_max = n_keys[m - 1];
  // Pass 1, block-major so that a K block is reused by every row: scores (one fma chain over
  // i = 0..d-1 per key, many keys per vector; K is dim-major within a block).
  for (int64_t b0 = 0; b0 < n_max; b0 += block) {
    const float* kb = k_blocks[b0 / block];
    for (int64_t r = 0; r < m; ++r) {
      const int64_t nb = std::min(block, n_keys[r] - b0);
      if (nb <= 0) continue;
      scores_block<64>(q + r * ldq, kb, block, nb, d, scratch + r * n_max + b0);
    }
  }
  // Pass 2, per row: scale, max, exp, fixed-order sum.
  std::vector<float> inv(static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) {
    float* s = scratch + r * n_max;
    const int64_t n = n_keys[r];
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      s[j] = s[j] * scale;
      mx = s[j] > mx ? s[j] : mx;
    }
    for (int64_t j = 0; j < n; ++j) s[j] = exp_fixed_inline(s[j] - mx);
    inv[r] = 1.0f / sum_fixed_inline(s, n);
  }
  // Pass 3, block-major: out[r] += p_j * V_j over keys in order (accumulators spill to out
  // between blocks, exactly).
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < d; ++i) out[r * ldo + i] = 0.0f;
  for (int64_t b0 = 0; b0 < n_max; b0 += block) {
    const float* vb = v_blocks[b0 / block];
    for (int64_t r = 0; r < m; ++r) {
      const int64_t nb = std::min(block, n_keys[r] - b0);
      if (nb <= 0) continue;
      const float* p = scratch + r * n_max + b0;
      float* o = out + r * ldo;
      switch (d) {
        case 32: weighted_values<32>(vb, ld, nb, p, inv[r], o); continue;
        case 64: weighted_values<64>(vb, ld, nb, p, inv[r], o); continue;
        case 128: weighted_values<128>(vb, ld, nb, p, inv[r], o); continue;
        case 256: weighted_values<256>(vb, ld, nb, p, inv[r], o); continue;
        default: break;
      }
      for (int64_t j = 0; j < nb; ++j) {
        const float* vj = vb + j * ld;
        const float pj = p[j] * inv[r];
        for (int64_t i = 0; i < d; ++i) o[i] = std::fma(pj, vj[i], o[i]);
      }
    }
  }
}

}  // namespace rw
