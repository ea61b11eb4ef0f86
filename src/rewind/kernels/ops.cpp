#include "rewind/kernels/ops.h"

#include <cmath>

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
}  // namespace

REWIND_CLONES
float dot_fixed(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = std::fma(a[i + l], b[i + l], acc[l]);
  for (int l = 0; i + l < n; ++l) acc[l] = std::fma(a[i + l], b[i + l], acc[l]);
  return reduce_lanes(acc);
}

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

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) {
  // log(1 + e^x), stable for large |x| (torch uses a threshold of 20 with beta 1).
  if (x > 20.0f) return x;
  return std::log1p(std::exp(x));
}

void swiglu(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = silu(g[i]) * u[i];
}

void gated_rmsnorm_heads(const float* o, const float* z, const float* w, float* y,
                         int64_t n_heads, int64_t d, float eps) {
  for (int64_t h = 0; h < n_heads; ++h) {
    const float* oh = o + h * d;
    const float* zh = z + h * d;
    float* yh = y + h * d;
    const float ms = sumsq_fixed(oh, d) / static_cast<float>(d);
    const float inv = 1.0f / std::sqrt(ms + eps);
    for (int64_t i = 0; i < d; ++i) yh[i] = (w[i] * (oh[i] * inv)) * silu(zh[i]);
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
    for (int64_t c = c0; c < c1; ++c) o[c] = silu(o[c]);
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
void gdn_step(float* S, const float* q, const float* k, const float* v, float alpha, float beta,
              float* o, int64_t dk, int64_t dv) {
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

REWIND_CLONES
void attention_head(const float* q, const float* const* k_blocks, const float* const* v_blocks,
                    int64_t block, int64_t ld, int64_t n_keys, int64_t d, float scale,
                    float* out, float* scratch) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n_keys; ++j) {
    const float* kj = k_blocks[j / block] + (j % block) * ld;
    const float s = dot_fixed(q, kj, d) * scale;
    scratch[j] = s;
    mx = s > mx ? s : mx;
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < n_keys; ++j) {
    const float p = std::exp(scratch[j] - mx);
    scratch[j] = p;
    sum += p;
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < d; ++i) out[i] = 0.0f;
  for (int64_t j = 0; j < n_keys; ++j) {
    const float* vj = v_blocks[j / block] + (j % block) * ld;
    const float p = scratch[j] * inv;
    for (int64_t i = 0; i < d; ++i) out[i] = std::fma(p, vj[i], out[i]);
  }
}

}  // namespace rw
